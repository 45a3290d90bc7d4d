"""What a run says: under a real pseudo-terminal, tqdm's bar with its rate and time left, the record's folder at
the start and the end with the next commands (W&B's own sync hint included), the verdict last; without a terminal,
plain lines with n/N, rate and time left and no carriage return; the meter's arithmetic."""

from __future__ import annotations

import fcntl
import io
import os
import re
import shlex
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from conftest import ROOT
from helpers.cli import cutlab
from helpers.contract import cutlab_env

TINY = ["train.epochs=2", "eval.gamma_test=[0,0.5]", "threads=1"]  # the embedded default: 18 steps, ~10 s
ANSI = re.compile(rb"\x1b\[[0-9;]*m")  # W&B colours its lines on a terminal


def run_in_terminal(args: list[str], runs: Path, env: dict) -> bytes:
    """``python -m cutlab ARGS`` with stdin, stdout and stderr on a fresh 120x40 pseudo-terminal; all it drew."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "cutlab", *args], cwd=ROOT, env=env, stdin=follower,
                               stdout=follower, stderr=follower, start_new_session=True)
    os.close(follower)
    drawn = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    os.close(leader)
    assert process.wait(timeout=600) == 0, bytes(drawn[-3000:]).decode(errors="replace")
    return bytes(drawn)


def test_a_run_on_a_terminal_draws_a_bar_with_its_eta_and_says_where_its_record_went(tmp_path):
    runs = tmp_path / "runs"
    env = cutlab_env(runs)
    env.pop("WANDB_SILENT", None)  # the tests' own quiet setting: a user's terminal shows W&B's messages
    drawn = ANSI.sub(b"", run_in_terminal([*TINY, "run_name=tty"], runs, env)).decode()
    run_dir = runs / "tty"
    # tqdm's bar, redrawn in place: counts, elapsed<left and the rate, then the full bar left on screen
    frames = [f for line in drawn.split("\r\n") for f in line.split("\r") if f.startswith("[cutlab] train:")]
    bar = re.compile(r"\[cutlab\] train: +(\d+)%\|.*\| (\d+)/18 \[(\d\d:\d\d)<(\d\d:\d\d|\?), +[\d.?]+(step/s|s/step)")
    parsed = [bar.match(f) for f in frames]
    assert len(frames) >= 3 and all(parsed), frames[:5]
    assert any(m[4] != "?" and int(m[2]) < 18 for m in parsed), "a time left is shown while the run trains"
    assert parsed[-1][2] == "18" and parsed[-1][1] == "100"
    assert "\r[cutlab] evaluating test:" in drawn
    lines = [line.split("\r")[-1] for line in drawn.split("\r\n") if line.strip()]
    said = [line for line in lines if line.startswith("[cutlab] ") and not line.startswith("[cutlab] train:")]
    # the record's folder first and at the end, with the next commands
    assert said[0] == f"[cutlab] run starting; record in {run_dir}/ (W&B offline)"
    (offline,) = run_dir.glob("wandb/offline-run-*")
    end = said.index(f"[cutlab] run complete; record in {run_dir}/")
    assert said[end + 1:end + 4] == [f"[cutlab]   report:      cutlab-analysis {run_dir} --out {run_dir}/report",
                                     f"[cutlab]   other data:  cutlab-eval {run_dir} data=NAME",
                                     f"[cutlab]   upload W&B:  wandb sync {offline}"]
    # W&B's own messages are not hidden: where its files are, and its sync hint for the same folder
    assert f"wandb: Run data is saved locally in {offline}" in lines
    assert f"wandb: wandb sync {offline}" in lines
    # the last line is the verdict
    assert re.fullmatch(r"\[cutlab\] done: test mean rmse over gamma_test [\d.]+, verdict (feasible|infeasible|"
                        r"slack_feasible); test loss by layer at gamma_test=0.09: .*", lines[-1]), lines[-3:]


def test_without_a_terminal_progress_is_plain_lines_and_the_printed_report_command_works(tmp_path):
    runs = tmp_path / "runs"
    result = cutlab([*TINY, "wandb.mode=disabled", "run_name=log"], runs)
    # text=True reads "\r" as a line end (universal newlines): a bar drawn into the log shows as tqdm's "NN%|"
    assert "\r" not in result.stderr and not re.search(r"\d+%\|", result.stderr), "a log gets no bar"
    line = re.compile(r"\[cutlab\] (train|evaluating validation|evaluating test): (\d+)/(\d+) (steps|batches) "
                      r"\((\d+)%\), [\d.]+ (steps/s|s/step|batches/s|s/batch), (\d\d:\d\d) elapsed, (\d\d:\d\d) left")
    counts = [(m[1], int(m[2]), int(m[3])) for m in map(line.match, result.stderr.splitlines()) if m]
    assert ("train", 18, 18) in counts and ("evaluating test", 4, 4) in counts, result.stderr[-2000:]
    assert all(done <= total for _, done, total in counts)
    final = next(l for l in result.stderr.splitlines() if l.startswith("[cutlab] train: 18/18"))
    assert "; epoch 2/2, layer losses [" in final, "a log line carries every layer's loss"
    run_dir = runs / "log"
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("[cutlab] done: ") and " verdict " in lines[-1]
    assert not any("wandb sync" in l for l in lines), "no W&B upload to suggest when W&B was off"
    # the printed next command, run as printed, makes the report
    (report,) = [l.split("report:", 1)[1].split() for l in lines if l.startswith("[cutlab]   report:")]
    assert report[0] == "cutlab-analysis"
    made = subprocess.run([sys.executable, "-m", "analysis", *report[1:]], cwd=ROOT, env=cutlab_env(runs),
                          capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-2000:]
    assert (run_dir / "report" / "report.md").exists() and (run_dir / "report" / "report.html").exists()


def test_the_meter_counts_the_rate_and_time_left_of_this_session_only():
    from cutlab.core.progress import Meter, plural, rate_text, tally, time_left

    assert time_left(5, 10, 0, 10.0) == 10.0  # 5 in 10 s: 5 more take 10 s
    assert time_left(6, 10, 4, 4.0) == 8.0  # resumed at 4: 2 in 4 s, so 4 more take 8 s
    assert time_left(4, 10, 4, 4.0) is None  # nothing done in this session yet: unknown
    assert time_left(10, 10, 10, 0.0) == 0.0  # all done (before this session): nothing left
    assert rate_text(2.5, "step") == "2.5 steps/s" and rate_text(0.25, "batch") == "4 s/batch"
    assert plural("batch") == "batches" and plural("run") == "runs"
    stream = io.StringIO()  # not a terminal: lines
    meter = Meter("train", 10, "step", stream=stream, every_s=3600)
    assert meter.bar is None
    meter.update(3)
    meter.update(5)
    assert len(stream.getvalue().splitlines()) == 1, "at most one line per every_s after the first"
    meter.update(10, "epoch 1/1")
    written = stream.getvalue().splitlines()[-1]
    assert re.fullmatch(r"\[cutlab\] train: 10/10 steps \(100%\), .+ elapsed, 00:00 left; epoch 1/1", written)
    runs = tally("sweep s", 3, "run", stream=stream)
    runs.update(1, "complete a")
    assert stream.getvalue().splitlines()[-1].startswith("[cutlab] sweep s: 1/3 runs done (33%), ")


def test_a_log_gets_its_first_line_as_the_first_unit_ends_with_a_time_left_then_one_every_every_s():
    """In a log an evaluation of Ped2 said nothing for 16-25 s: its first line came every_s after its first batch.
    A quiet meter (cutlab-analysis: a quick read prints nothing) still waits every_s."""
    from cutlab.core.progress import Meter

    stream = io.StringIO()
    meter = Meter("evaluating test", 40, "batch", initial=1, stream=stream, every_s=3600)  # made at the first batch
    meter.update(1)
    assert stream.getvalue() == "", "no rate before a batch of its own has ended"
    meter.update(2)
    (first,) = stream.getvalue().splitlines()
    assert re.fullmatch(r"\[cutlab\] evaluating test: 2/40 batches \(5%\), .+, \d\d:\d\d elapsed, \d\d:\d\d left",
                        first), first
    for done in range(3, 40):
        meter.update(done)
    assert len(stream.getvalue().splitlines()) == 1, "then at most one line per every_s"
    quiet = io.StringIO()
    meter = Meter("reading runs", 40, "run", stream=quiet, every_s=3600, first_line=False)
    for done in range(40):
        meter.update(done)
    assert quiet.getvalue() == ""


def test_a_note_given_as_a_function_is_made_only_when_a_line_is_written_or_the_bar_drawn():
    """A run reports every step; its note (layer losses) is formatted only for the lines and frames shown."""
    from cutlab.core.progress import Meter

    made = []

    def note(step: int):
        return lambda: made.append(step) or f"at {step}"

    stream = io.StringIO()
    meter = Meter("train", 10, "step", stream=stream, every_s=3600)
    for step in range(1, 11):
        meter.update(step, note(step))
    assert made == [1, 10], "only the lines that were written (the first and the last) made their notes"
    assert stream.getvalue().splitlines()[-1].endswith("; at 10")
    drawn = io.StringIO()
    with Meter("train", 10, "step", stream=drawn, bar=True) as bar:
        for step in range(1, 11):
            bar.update(step, note(step))
    assert made[-1] == 10 and len(made) < 11, "the bar drew fewer frames than steps, each with the latest note"
    assert drawn.getvalue().rstrip().endswith("at 10]"), drawn.getvalue()[-200:]


@pytest.mark.parametrize("forced, expected", [("lines", False), ("bar", True)])
def test_cutlab_progress_forces_lines_or_bars(monkeypatch, forced, expected):
    from cutlab.core.progress import MODE_ENV, wants_bar

    monkeypatch.setenv(MODE_ENV, forced)
    assert wants_bar(io.StringIO()) is expected
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as terminal:
        assert wants_bar(terminal) is expected
        monkeypatch.delenv(MODE_ENV)
        assert wants_bar(terminal) is True and wants_bar(io.StringIO()) is False
    os.close(leader)


def test_an_infeasible_run_is_told_whether_it_lacks_total_descent_or_a_layer_is_out_of_step():
    from cutlab.run.progress import chain_note

    short = {"last_layer_loss": 0.26, "last_layer_bound": 0.155, "violated_layers": [1, 2, 3]}
    assert chain_note(short) == ("infeasible at layers 1, 2, 3: validation l_L is 0.26, and the constraints together "
                                 "allow at most epsilon (1 - alpha)^L = 0.155, so more total descent is needed over the L layers")
    spaced = {"last_layer_loss": 0.34, "last_layer_bound": 2.1, "violated_layers": [4, 7]}
    assert chain_note(spaced).endswith("= 2.1, so the total descent is there and those layers miss their own step")
    one = {"last_layer_loss": 0.34, "last_layer_bound": 2.1, "violated_layers": [2]}
    assert chain_note(one).startswith("infeasible at layer 2: ")  # not "layers 2"


def test_an_infeasible_run_says_why_on_the_line_before_its_verdict(tmp_path):
    import json

    from cutlab.run.progress import chain_note

    # alpha 0.99 asks every layer to remove 99 % of the loss before it: no model meets that in 18 steps
    result = cutlab([*TINY, "wandb.mode=disabled", "run_name=steep", "train.alpha=0.99"], tmp_path / "runs")
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "runs" / "steep" / "summary.json").read_text())
    feasibility = summary["feasibility"]
    assert feasibility["status"] == "infeasible"
    assert feasibility["last_layer_bound"] == pytest.approx(summary["epsilon"] * 0.01 ** 3)  # L = 3
    lines = result.stderr.strip().splitlines()
    assert lines[-2] == "[cutlab] " + chain_note(feasibility) and "more total descent is needed" in lines[-2]
    assert lines[-1].startswith("[cutlab] done: ") and "verdict infeasible" in lines[-1]


def test_the_upload_command_names_this_runs_w_and_b_sessions_alone(tmp_path):
    # killed before its first checkpoint, a run starts again under a new W&B id: "wandb sync <run>/wandb/offline-run-*"
    # also uploaded the first attempt's folder, as a second, empty W&B run
    from cutlab.run.progress import next_commands

    run_dir = tmp_path / "run"
    for session in ("20261206_100000-killed1", "20261206_100100-abc123"):
        (run_dir / "wandb" / f"offline-run-{session}").mkdir(parents=True)
    assert next_commands(run_dir, "offline", wandb_id="abc123")[-1] == \
        f"upload W&B:  wandb sync {run_dir / 'wandb' / 'offline-run-20261206_100100-abc123'}"
    (run_dir / "wandb" / "offline-run-20261206_110000-abc123").mkdir()  # resumed: a second session of the same run
    assert next_commands(run_dir, "offline", wandb_id="abc123")[-1] == \
        f"upload W&B:  wandb sync {run_dir}/wandb/offline-run-*-abc123"


def test_a_run_interrupted_before_its_first_checkpoint_is_not_said_to_resume_from_one(tmp_path, capsys):
    """A run stopped after its record was begun and before its first checkpoint (a second Ctrl-C inside its first
    step, a stop between its set-up and its training loop). Before: "(the same command resumes it from its last
    checkpoint)", of a checkpoint that did not exist."""
    from cutlab.run.progress import ProgressReporter

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    reporter = ProgressReporter(enabled=False, total_steps=4, epochs=1)
    reporter.stopped(run_dir, "interrupted")
    (run_dir / "checkpoint.pt").write_bytes(b"")
    reporter.stopped(run_dir, "interrupted")
    first, second = capsys.readouterr().err.splitlines()
    assert first.startswith("[cutlab] run interrupted before its first checkpoint; record in ")
    assert first.endswith("(the same command starts it again)")
    assert second.startswith("[cutlab] run interrupted; record in ")
    assert second.endswith("(the same command resumes it from its last checkpoint)")


def test_the_next_commands_never_start_a_path_with_a_dash(tmp_path, monkeypatch):
    # paths.runs_dir=-lead2: "cutlab-analysis -lead2/N --out -lead2/N/report", which argparse read as options
    from cutlab.run.progress import next_commands

    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "-lead2" / "N"
    assert next_commands(run_dir, "disabled")[:2] == ["report:      cutlab-analysis ./-lead2/N --out ./-lead2/N/report",
                                                      "other data:  cutlab-eval ./-lead2/N data=NAME"]


def test_an_evaluation_is_announced_as_it_starts_and_its_elapsed_time_counts_from_there(monkeypatch, capsys):
    """A ViT run resumed into its evaluation said nothing for 116 s, then "2/8 batches, 58.4 s/batch, 00:58 elapsed":
    its meter was made as the first batch ended, and wrote its first line as the second did. The first batch stays
    out of the rate (its one-off costs), not out of the elapsed time; the validation lines name the test pass that
    follows, and its time at their rate, since each meter's time left is its own pass's."""
    import types

    import cutlab.core.progress as progress
    from cutlab.run.progress import ProgressReporter

    clock = [1000.0]
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.delenv(progress.MODE_ENV, raising=False)
    reporter = ProgressReporter(enabled=True, total_steps=0, epochs=0)
    lines = lambda: capsys.readouterr().err.splitlines()
    report = reporter.evaluating("test")
    report(0, 4)
    assert lines() == ["[cutlab] evaluating test: 4 batches"], "a line before the first batch"
    report = reporter.evaluating("validation", "each at 12 gammas", then=("test", 51))
    report(0, 8)
    assert lines() == ["[cutlab] evaluating validation: 8 batches, each at 12 gammas; then test: 51 batches"]
    clock[0] += 58
    report(1, 8)  # longer than a line's every_s: a line, with no rate yet
    assert lines() == ["[cutlab] evaluating validation: 1/8 batches (12%), ? batches/s, 00:58 elapsed, ? left; "
                       "then test: 51 batches"]
    clock[0] += 58
    report(2, 8)
    assert lines() == ["[cutlab] evaluating validation: 2/8 batches (25%), 58 s/batch, 01:56 elapsed, 05:48 left; "
                       "then test: 51 batches, about 49:18 at this rate"]


def test_a_runs_resume_and_skip_lines_go_to_stderr_with_its_other_lines(tmp_path):
    """"resuming <run> from step N" and "<run> is complete; skipped" went to stdout through Hydra's job logging, so
    ``cutlab ... 2> run.log`` lost exactly the lines that say whether work was resumed or skipped."""
    import json

    runs = tmp_path / "runs"
    run_dir = runs / "again"
    args = ["train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0]", "threads=1", "wandb.mode=disabled",
            "run_name=again"]
    cutlab(args, runs)
    summary = json.loads((run_dir / "summary.json").read_text())  # stopped in its evaluation, after its training
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    resumed = cutlab(args, runs)
    said = resumed.stderr.splitlines()
    at = said.index(f"[cutlab] resuming {run_dir} from step 2 (epoch 1)")
    assert re.fullmatch(r"\[cutlab\] evaluating validation: \d+ batch(es)?, each at 2 gammas; then test: \d+ "
                        r"batch(es)?", said[at + 1]), said[at + 1]  # straight into its evaluation, announced
    assert "resuming" not in resumed.stdout
    skipped = cutlab(args, runs)
    assert skipped.stdout == ""
    assert skipped.stderr.splitlines() == [f"[cutlab] {run_dir} is complete; skipped (pass run_name=<new name> to "
                                           "train it again)"]


def test_train_epsilon_auto_shows_the_progress_of_its_pass_and_says_the_epsilon_found(tmp_path):
    """train.epsilon=auto evaluated the untrained model in silence (36 s before a ViT run's next line), and never
    said the epsilon it found."""
    import json

    runs = tmp_path / "runs"
    said = cutlab(["train=erm", "train.epochs=1", "train.max_steps_per_epoch=1", "eval.gamma_test=[0]", "threads=1",
                   "wandb.mode=disabled", "run_name=ref"], runs).stderr.splitlines()
    epsilon = json.loads((runs / "ref" / "summary.json").read_text())["epsilon"]
    start = said.index("[cutlab] evaluating the untrained model (train.epsilon=auto): 8 batches, each at "
                       "gamma_train 0.09")
    assert said[start + 1].startswith("[cutlab] evaluating the untrained model (train.epsilon=auto): ")
    assert f"[cutlab] train.epsilon=auto: epsilon = {epsilon:.4g}, l_0 of the untrained model on the first 32 " \
           "training samples at gamma_train 0.09" in said[start + 1:]
