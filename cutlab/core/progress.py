"""Progress with its rate and time left, for every loop that reports one: a run's steps and evaluation, a data
set's preparation, a sweep's runs, a search's trials, a reproduction's grids.

On a terminal it is tqdm's bar; anywhere else (a SLURM log, a pipe, a launcher's captured stderr) it is a plain
line as the first unit of this session ends (its rate and time left known: an evaluation of Ped2 said nothing for
16-25 s; with a warm-up, the first unit after it), then at most every ``every_s`` seconds and at the end, with no
carriage return, so a log reads top to bottom:

    [cutlab] train: 9/18 steps (50%), 2.31 steps/s, 00:04 elapsed, 00:04 left; layer losses [...]

``CUTLAB_PROGRESS=lines`` forces the lines on a terminal too (several processes sharing one terminal, whose
bars would overwrite each other); ``CUTLAB_PROGRESS=bar`` forces the bar.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, TextIO, Union

from tqdm import tqdm

MODE_ENV = "CUTLAB_PROGRESS"
MODES = ("bar", "lines")  # what MODE_ENV may force (unset: a bar on a terminal, lines elsewhere)
PREFIX = "[cutlab] "
LINE_EVERY_S = 10.0  # a plain line at most this often: a day-long SLURM run writes ~9000 lines, not 10^5
# the text after the counts, or a function making it: called only when a line is written or the bar drawn, so a
# loop that reports every step (a run's layer losses) formats one note per line, not one per step
Note = Union[str, Callable[[], str]]


def wants_bar(stream: TextIO) -> bool:
    """A bar on a terminal, lines elsewhere, unless ``CUTLAB_PROGRESS`` says which."""
    forced = os.environ.get(MODE_ENV, "").strip().lower()
    if forced in MODES:
        return forced == "bar"
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def terminal_width(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


def print_line(text: str) -> None:
    """A line of cutlab's on stderr, in one write with its newline (Meter._print says why)."""
    sys.stderr.write(f"{PREFIX}{text}\n")
    sys.stderr.flush()


def duration(seconds: float | None) -> str:
    """``00:04``, ``1:02:03``: tqdm's own format, so that bars and lines read alike; ``?`` when unknown."""
    return "?" if seconds is None else tqdm.format_interval(max(0.0, seconds))


def plural(unit: str) -> str:
    return unit + ("es" if unit.endswith(("s", "sh", "ch", "x")) else "s")


def counted(count: int, unit: str) -> str:
    """``1 run``, ``2 runs``."""
    return f"{count} {unit if count == 1 else plural(unit)}"


def rate_text(per_s: float | None, unit: str) -> str:
    """``2.31 steps/s``, or ``4.2 s/step`` when slower than one a second."""
    if not per_s:
        return f"? {plural(unit)}/s"
    return f"{per_s:.3g} {plural(unit)}/s" if per_s >= 1 else f"{1 / per_s:.3g} s/{unit}"


def session_rate(done: int, initial: int, elapsed: float) -> float | None:
    """Done per second in this session (``initial``: what was done before it started, e.g. the steps of a resumed
    run); None until one has been done."""
    return (done - initial) / elapsed if elapsed > 0 and done > initial else None


def time_left(done: int, total: int, initial: int, elapsed: float) -> float | None:
    """The remaining count at the rate of this session; None until one has been done."""
    if done >= total:
        return 0.0
    rate = session_rate(done, initial, elapsed)
    return (total - done) / rate if rate else None


class _Bar(tqdm):
    """tqdm's bar, whose postfix is made from the latest note only when the bar is drawn."""

    pending: Callable[[], str] | None = None

    @property
    def format_dict(self):  # what tqdm reads at every draw (and at close)
        if self.pending is not None:
            note, self.pending = self.pending(), None
            if note:
                self.set_postfix_str(note, refresh=False)
        return super().format_dict


class Meter:
    """``done`` out of ``total`` ``unit``s (the singular), drawn as a bar or written as lines (the module's
    docstring); ``initial``: done before this session, left out of the rate (a resumed run's steps); ``warmup``: the
    first units of this session, counted in the elapsed time but left out of a line's rate and time left (an
    evaluation's first batch, which carries the phase's one-off costs)."""

    def __init__(self, label: str, total: int, unit: str, *, initial: int = 0, enabled: bool = True,
                 every_s: float = LINE_EVERY_S, stream: TextIO | None = None, bar: bool | None = None,
                 prefix: str = PREFIX, counted: str = "", first_line: bool = True, warmup: int = 0) -> None:
        self.label, self.total, self.unit, self.initial = label, max(int(total), 0), unit, initial
        self.warmup = warmup
        self.counted = counted  # after the counts of a line: "2/3 runs done"
        self.first_line = first_line  # a line as the first unit ends (False: none before every_s, a quiet meter)
        self.enabled, self.every_s, self.prefix = enabled, every_s, prefix
        self.stream = stream or sys.stderr
        self.done, self._note, self._left = initial, "", None
        self.started = self.last = time.perf_counter()  # the first line once a rate can be told
        # (done, time) the rate counts from: the start, or the end of the warm-up once it has ended
        self._rate_from: tuple[int, float] | None = None if warmup > 0 else (initial, self.started)
        self.bar = None
        if enabled and (wants_bar(self.stream) if bar is None else bar):
            # a terminal that reports no size (a bare pseudo-terminal) would get no bar at all: 100 x 20 then
            sized = terminal_width(self.stream) > 0
            self.bar = _Bar(total=self.total, initial=initial, desc=f"{prefix}{label}", unit=unit, file=self.stream,
                            dynamic_ncols=sized, ncols=None if sized else 100, nrows=None if sized else 20,
                            mininterval=0.2, smoothing=0.1, leave=True)

    @property
    def note(self) -> str:
        """The latest note, made (once) when first asked for."""
        if callable(self._note):
            self._note = self._note()
        return self._note

    def update(self, done: int, note: Note = "", left: float | None = None) -> None:
        """``done`` so far (not an increment); ``note`` follows the counts (a run's layer losses); ``left``: the time
        left where the caller knows it better than this session's rate (a line's, not the bar's: grids of unequal
        cost)."""
        self.done, self._note, self._left = done, note, left
        now = time.perf_counter()
        if self._rate_from is None and done >= self.initial + self.warmup:
            self._rate_from = (done, now)
        if not self.enabled:
            return
        if self.bar is not None:
            if callable(note):
                self.bar.pending = note
            elif note:
                self.bar.pending = None
                self.bar.set_postfix_str(note, refresh=False)
            self.bar.update(done - self.bar.n)
            return
        # the first line as soon as a time left can be told
        first = self.first_line and self._rate_from is not None and done > self._rate_from[0]
        if first or now - self.last >= self.every_s or done >= self.total:
            self.last, self.first_line = now, False
            self._print(self.line())

    def already_done(self, count: int = 1) -> None:
        """``count`` units found done before this session (cutlab-eval's evaluations done already): counted as
        ``initial`` is, left out of the rate and the time left."""
        self.initial += count
        if self._rate_from is not None:
            self._rate_from = (self._rate_from[0] + count, self._rate_from[1])

    @property
    def rate(self) -> float | None:
        """Units a second in this session after the warm-up; None until one has been done."""
        return self._rate_and_left()[0]

    def _rate_and_left(self) -> tuple[float | None, float | None]:
        now = time.perf_counter()
        base, since = self._rate_from or (self.done, now)
        return session_rate(self.done, base, now - since), time_left(self.done, self.total, base, now - since)

    def line(self) -> str:
        """The plain line: counts, percent, rate, elapsed (since the meter was made) and time left."""
        elapsed = time.perf_counter() - self.started
        percent = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        rate, left = self._rate_and_left()
        left = left if self._left is None else self._left
        text = (f"{self.label}: {self.done}/{self.total} {plural(self.unit)}{self.counted}{percent}, {rate_text(rate, self.unit)}, "
                f"{duration(elapsed)} elapsed, {duration(left)} left")
        return f"{text}; {self.note}" if self.note else text

    def write(self, text: str) -> None:
        """A message of its own (above the bar on a terminal, so the bar is not broken)."""
        if self.enabled:
            self._print(text)

    def _print(self, text: str) -> None:
        if self.bar is not None:
            tqdm.write(f"{self.prefix}{text}", file=self.stream)
        else:  # one write: print writes the newline apart, and a signal's exception between the two joined the
            # command's last line to this one (a SIGTERM as the synthetic clips were generated)
            self.stream.write(f"{self.prefix}{text}\n")
            self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Meter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def tally(label: str, total: int, unit: str, initial: int = 0, prefix: str = PREFIX,
          stream: TextIO | None = None, counted: str = " done") -> Meter:
    """Whole jobs of a batch (a sweep's runs, a search's trials, a reproduction's grids), one line as each ends:
    never a bar, since these lines are the batch's record of what ended and a run's bar may be drawing below."""
    return Meter(label, total, unit, initial=initial, bar=False, every_s=0.0, prefix=prefix, stream=stream,
                 counted=counted)
