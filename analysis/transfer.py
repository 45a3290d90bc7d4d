"""The report's section on evaluations of finished runs on other data (``cutlab-eval``'s records).

Each run folder may hold ``evaluations/<data>-<key>/`` (cutlab.transfer.record): the run's final weights evaluated on
other data or on another gamma_test grid. This module reads them for the runs of a report and adds

- a train-data x test-data table: per run, its mean last-layer metric over each evaluation's grid (and over its own
  test split's grid), with the verdict on that data marked as in the paper's tables;
- per evaluation dataset, a figure of the last layer's metric against gamma_test, one line per run and grid.

Nothing is written when no run has an evaluation record, so reports of plain runs are unchanged.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from .collect import RunTable
from .data_labels import data_configs
from .consistency import evaluation_mismatch
from .figure_kit import ARM_STYLE, GAMMA_TEST, RC, _math, _metric_label, _save
from .figure_marks import line_style
from .markdown import inert
from .selection import ARM_LABELS
from .verdicts import CAPTION, mark
from cutlab.atomic import write_atomic
from cutlab.config.data_settings import settings_apart
from cutlab.run.records import not_a_file
from cutlab.transfer.record import EVALUATIONS, METRICS, RECORD, data_label

STEM = "transfer"  # tables/transfer.{md,csv}, figures/transfer_<data>.{png,pdf}
OWN = "own test split"
LEGEND_WIDTH = 90  # characters a legend row holds across the figure's 5.5 inches
LEGEND_LINE = 0.16  # inches of figure height a legend row takes
MORE_MARKERS = ("D", "v", "P", "X", "*", "h", "<", ">")  # none an arm's (o, ^, s): a second line is no other arm


def read_evaluations(runs: RunTable) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(one row per evaluation record, their metrics.csv in long format, the records that could not be read)."""
    rows, requests, metrics, problems = [], [], [], []
    complete = runs.runs[runs.runs["usable"]] if "usable" in runs.runs else runs.runs.iloc[0:0]
    for _, run in complete.iterrows():
        for path in sorted(Path(run["path"]).glob(f"{EVALUATIONS}/*/{RECORD}")):
            irregular = not_a_file(path) or not_a_file(path.parent / METRICS)
            if irregular:  # a link or a FIFO: reading it would read another file, or never end
                problems.append(f"{irregular}: not an evaluation record cutlab-eval wrote")
                continue
            try:
                record = json.loads(path.read_text())
                frame = pd.read_csv(path.parent / METRICS)
                request = record["request"]
                grid = tuple(float(g) for g in request["gamma_test"])
                row = {"run": run["run"], "arm": run.get("arm"), "model": run.get("model"), "L": run.get("L"),
                       "gamma_train": run.get("gamma_train"), "trained_on": run.get("dataset"),
                       "grid": grid, "metric": record["metric"],
                       "mean_metric": float(record["mean_metric"]), "verdict": record.get("verdict"),
                       "status": record.get("status"), "folder": str(path.parent)}
                if not isinstance(request["data"], dict) or not isinstance(request["split"], str):
                    raise TypeError("the request's data is not a mapping or its split not a name")
            except (OSError, ValueError, KeyError, TypeError, pd.errors.ParserError) as error:
                problems.append(f"{path}: {type(error).__name__}: {error}")
                continue
            if row["status"] != "complete":
                problems.append(f"{path}: status {row['status']!r} (not complete)")
                continue
            mismatch = evaluation_mismatch(run, record, frame)
            if mismatch:  # copied or linked from another run's folder: its numbers would stand under this run
                problems.append(f"{path}: {mismatch}")
                continue
            rows.append(row)
            requests.append(request)
            metrics.append(frame.assign(run=run["run"], grid=[grid] * len(frame)))
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame.insert(6, "label", columns_apart(evaluation_labels(runs, requests), list(frame["grid"]), requests))
        for metric_frame, (_, row) in zip(metrics, frame.iterrows()):
            metric_frame["label"] = row["label"]
    return (frame, pd.concat(metrics, ignore_index=True) if metrics else pd.DataFrame(), problems)


def evaluation_labels(runs: RunTable, requests: list[dict]) -> list[str]:
    """Each evaluation's data as the report names it: its name with what tells its data apart from the other
    evaluations' and the report's runs' data of that name, as runs' data sets are named (cutlab.config.data_settings),
    so Ped2 from another ``data.root`` is not shown as the Ped2 the runs trained on. Made from the stored request,
    so records written before cutlab-eval's own label said so read the same."""
    labels = [""] * len(requests)
    names = [str(request["data"].get("name")) for request in requests]
    trained = runs.runs
    for name in dict.fromkeys(names):
        indices = [i for i, other in enumerate(names) if other == name]
        runs_of = trained[trained["cfg.data.name"] == name] if "cfg.data.name" in trained else trained.iloc[0:0]
        apart = settings_apart([requests[i]["data"] for i in indices] + data_configs(runs_of))
        for i, parts in zip(indices, apart):
            labels[i] = data_label(requests[i], apart=parts)
    return labels


def columns_apart(labels: list[str], grids: list[tuple], requests: list[dict]) -> list[str]:
    """Each evaluation's column: its data's label, and where evaluations on that data and grid were asked otherwise
    (another ``eval.batch_size`` draws other noise, another noise mean), what differs, e.g. ``[batch_size=2]``.
    The run's seed is the run's own, not the evaluation's: evaluations of several seeds share one column."""
    own = ("data", "gamma_test", "seed")  # the label and the grid say the first two
    settings = [{key: value for key, value in request.items() if key not in own} for request in requests]
    columns = list(labels)
    for cell in dict.fromkeys(zip(labels, grids)):
        members = [i for i, other in enumerate(zip(labels, grids)) if other == cell]
        # the rule that tells data configs apart, applied to the rest of the request
        for i, differ in zip(members, settings_apart([settings[i] for i in members], short=False)):
            columns[i] += f" [{', '.join(differ)}]" if differ else ""
    return columns


def _grid(grid: tuple[float, ...]) -> str:
    return f"γ_test {grid[0]:g}…{grid[-1]:g} ({len(grid)})"


def _column(label: str, grid: tuple[float, ...]) -> str:
    return f"{label} {_grid(grid)}"


def transfer_table(runs: RunTable, evaluations: pd.DataFrame) -> pd.DataFrame:
    """Rows: runs (model, arm, L, γ_train, trained on); columns: the run's own test split and each evaluation data."""
    table = {}
    for _, evaluation in evaluations.iterrows():
        run = runs.run(evaluation["run"])
        key = (run["run"], run["model"], ARM_LABELS.get(run["arm"], "?"), int(run["L"]), float(run["gamma_train"]),
               run["dataset"])
        own_grid = tuple(sorted(set(runs.metrics.loc[(runs.metrics["run"] == run["run"])
                                                     & (runs.metrics["split"] == "test"), "gamma_test"])))
        row = table.setdefault(key, {})
        if own_grid:
            row[_column(f"{OWN} ({run['dataset']})", own_grid)] = _cell(run["test_mean_metric"], run["verdict"])
        row[_column(evaluation["label"], evaluation["grid"])] = _cell(evaluation["mean_metric"], evaluation["verdict"])
    index = pd.MultiIndex.from_tuples(list(table), names=["run", "model", "arm", "L", "γ_train", "trained on"])
    frame = pd.DataFrame(list(table.values()), index=index)
    own = [c for c in frame.columns if c.startswith(OWN)]
    return frame[own + sorted(c for c in frame.columns if c not in own)].fillna("—")


def _cell(value: float, verdict) -> str:
    return f"{float(value):.2f}" + (f" {mark(verdict)}" if mark(verdict) else "")


def transfer_figure(runs: RunTable, evaluations: pd.DataFrame, metrics: pd.DataFrame, label: str, out_dir: Path,
                    stem: str) -> list[Path]:
    """The last layer's metric against γ_test on one evaluation dataset, one line per run and grid (arm styles of
    Fig 2, each further line of an arm its own marker; a constrained run not strictly feasible on that data dotted,
    with hollow markers, as in Fig 2)."""
    chosen = evaluations[evaluations["label"] == label]
    evaluated = [runs.run(name) for name in chosen["run"]]
    legends = [_wrapped(legend) for legend in _legends(evaluated, list(chosen["grid"]), list(chosen["verdict"]))]
    entry_lines = sum(legend.count("\n") + 1 for legend in legends)
    with matplotlib.rc_context(RC):
        figure = Figure(figsize=(5.5, 3.4 + LEGEND_LINE * entry_lines), layout="constrained")
        ax = figure.subplots()
        for (_, evaluation), run, legend, marker in zip(chosen.iterrows(), evaluated, legends,
                                                        _markers([run["arm"] for run in evaluated])):
            rows = metrics[(metrics["run"] == evaluation["run"]) & (metrics["label"] == label)
                           & (metrics["grid"] == evaluation["grid"]) & (metrics["metric"] == evaluation["metric"])]
            rows = rows[rows["layer"] == rows["layer"].max()].sort_values("gamma_test")
            style = {**ARM_STYLE.get(run["arm"], {}), "marker": marker,
                     **line_style({"verdict": evaluation["verdict"]})}
            ax.plot(rows["gamma_test"], rows["value"], **{**style, "label": _math(legend)})
            ax.axvline(run["gamma_train"], color=style.get("color", "grey"), linewidth=0.6, alpha=0.4)
        ax.set_xlabel(GAMMA_TEST)
        ax.set_ylabel(_metric_label(chosen["metric"].iloc[0]))
        ax.set_title(_math(f"evaluated on {label}"))
        # below the plot, one entry a row: beside or inside it, entries this long squeezed the plot to nothing
        figure.legend(loc="outside lower center", ncol=1)
        return _save(figure, out_dir, stem)


def _legends(runs: list[pd.Series], grids: list[tuple], verdicts: list) -> list[str]:
    """One legend entry per line: arm, model, L, γ_train, training data and the verdict's mark; where that leaves
    entries alike, what differs among them: the γ_test grid as the table's columns name it (one run evaluated twice),
    then the seed (several seeds of one cell), then the run's folder."""
    legends = [f"{ARM_STYLE.get(run['arm'], {}).get('label', run['arm'])} · {run['model']} L={int(run['L'])} "
               f"γ_train={run['gamma_train']:g} · trained on {run['dataset']}" for run in runs]
    for extra in (lambda i: _grid(grids[i]), lambda i: f"seed {runs[i].get('seed')}", lambda i: str(runs[i]["run"])):
        alike: dict[str, list[int]] = {}
        for i, legend in enumerate(legends):
            alike.setdefault(legend, []).append(i)
        for members in alike.values():
            if len({extra(i) for i in members}) > 1:
                for i in members:
                    legends[i] += f" · {extra(i)}"
    return [legend + (f" {mark(verdict)}" if mark(verdict) else "") for legend, verdict in zip(legends, verdicts)]


def _wrapped(legend: str) -> str:
    """A legend entry in rows of at most LEGEND_WIDTH characters, broken after a ``·`` where it can be: in one row,
    a long run folder's name ran past the figure's edges."""
    rows = [""]
    for part in legend.split(" · "):
        joined = f"{rows[-1]} · {part}" if rows[-1] else part
        if len(joined) <= LEGEND_WIDTH or not rows[-1]:
            rows[-1] = joined
        else:
            rows[-1] += " ·"
            rows.append(part)
    return "\n".join(line for row in rows for line in textwrap.wrap(row, LEGEND_WIDTH, break_on_hyphens=False))


def _markers(arms: list[str]) -> list[str]:
    """Each line's marker: its arm's for the arm's first line, then others in turn, so no two lines look alike (one
    run on two grids, several seeds)."""
    seen: dict[str, int] = {}
    markers = []
    for arm in arms:
        n = seen[arm] = seen.get(arm, -1) + 1
        own = ARM_STYLE.get(arm, {}).get("marker", "o")
        markers.append(own if n == 0 else MORE_MARKERS[(n - 1) % len(MORE_MARKERS)])
    return markers


def figure_stems(labels: list[str]) -> dict[str, str]:
    """Each evaluation dataset's figure file name; labels that make the same name (``video_folder:clips_all`` and
    ``video_folder:clips (all)``) get _2, _3, ... in their order, so no figure overwrites another."""
    stems: dict[str, str] = {}
    for label in labels:
        stem = f"{STEM}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', label).strip('_')}"
        taken = set(stems.values())
        stems[label] = stem if stem not in taken else next(f"{stem}_{n}" for n in range(2, len(labels) + 2)
                                                           if f"{stem}_{n}" not in taken)
    return stems


def transfer_sections(runs: RunTable, out_dir: Path, tables_dir: str = "tables", figures_dir: str = "figures",
                      written: list[Path] | None = None) -> list[str]:
    """The report lines (and files) for the evaluation records of ``runs``; none when there are none. The files
    written are added to ``written`` (the report removes its earlier ones not among them once it is whole)."""
    written = [] if written is None else written
    evaluations, metrics, problems = read_evaluations(runs)
    if evaluations.empty and not problems:
        return []
    lines = ["## Evaluations on other data (cutlab-eval)", ""]
    if evaluations.empty:
        return lines + ["No readable evaluation record:", "", *(f"- {inert(p)}" for p in problems)]
    table = transfer_table(runs, evaluations)
    (out_dir / tables_dir).mkdir(parents=True, exist_ok=True)
    markdown = markdown_table(table.reset_index())
    for path, text in ((out_dir / tables_dir / f"{STEM}.csv", table.to_csv()),
                       (out_dir / tables_dir / f"{STEM}.md", markdown + "\n")):
        write_atomic(path, text)  # a full disk leaves the earlier file, never a cut-off one
        written.append(path)
    metric = " or ".join(dict.fromkeys(evaluations["metric"]))  # rmse for video, accuracy for text
    lines += [f"Finished runs' final weights evaluated on data they were not trained on. Each entry: the last "
              f"layer's test {metric} averaged over that column's γ_test grid (first…last, number of points), "
              "marked with the verdict on that data (the run's constraints checked on the evaluated split at "
              f"γ_test = γ_train). {CAPTION} Columns with different grids are not comparable with each other. In the "
              "figures, a constrained run that is not strictly feasible on that data is drawn dotted with hollow "
              "markers.", "",
              markdown, "", f"Files: [Markdown]({tables_dir}/{STEM}.md) · [CSV]({tables_dir}/{STEM}.csv)"]
    labels = list(dict.fromkeys(evaluations["label"]))
    for label, stem in figure_stems(labels).items():
        paths = transfer_figure(runs, evaluations, metrics, label, out_dir / figures_dir, stem)
        written += paths
        png = next(p for p in paths if p.suffix == ".png")
        own = evaluations.loc[evaluations["label"] == label, "metric"].iloc[0]
        lines += ["", f"### {inert(own.upper() if own == 'rmse' else own)} vs γ_test on {inert(label)}", "",
                  f"![{inert(label)}]({figures_dir}/{png.name})", "", f"[PDF]({figures_dir}/{png.stem}.pdf)"]
    if problems:
        lines += ["", "Evaluation records not counted:", "", *(f"- {inert(p)}" for p in problems)]
    return lines


def markdown_table(frame: pd.DataFrame) -> str:
    """A Markdown table of ``frame``; cells are record text, made inert (a run name cannot break the report)."""
    def row(values) -> str:
        return "| " + " | ".join(inert(value) for value in values) + " |"

    numeric = [pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns]
    return "\n".join([row(frame.columns), "|" + "".join("---:|" if n else "---|" for n in numeric),
                      *(row(values) for values in frame.itertuples(index=False))])
