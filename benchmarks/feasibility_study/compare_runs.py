"""The tables of PENALTY.md, from the committed run records: each run's validation verdict, validation RMSE (over the
gamma_test grid and at gamma_test = gamma_train), test RMSE, steps to strict feasibility and per-sample descent, and
two record folders compared setting by setting; one row a run adds the largest relative violation, the selected
iterate's step and the test AUC (text runs).

    .venv/bin/python benchmarks/feasibility_study/compare_runs.py RUNS...                      # one row a run
    .venv/bin/python benchmarks/feasibility_study/compare_runs.py BEFORE... --against AFTER...  # side by side

A setting is (data, model, L, gamma_train, seed) of a constrained run, read from each run's config.yaml, so records
of one setting compare whatever their folder names. Test numbers are printed for the record; the study chose on
validation only.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from omegaconf import OmegaConf


def read_run(run_dir: Path) -> dict | None:
    """One complete constrained run's numbers, or None for anything else (an ERM run, a partial one)."""
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    feasibility = summary.get("feasibility")
    if summary.get("status") != "complete" or not feasibility:
        return None
    config = OmegaConf.load(run_dir / "config.yaml")
    if not config.train.constrained:
        return None
    in_distribution = summary["in_distribution"]
    with open(run_dir / "eval.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["split"] == "val" and row["metric"] == summary["metric"]]
    last = max(int(row["layer"]) for row in rows)
    at_gamma_train = next(float(row["value"]) for row in rows if int(row["layer"]) == last
                          and abs(float(row["gamma_test"]) - in_distribution["gamma"]) < 1e-9)
    violations = feasibility["relative_violations"]
    worst = max(range(len(violations)), key=violations.__getitem__)
    return {"setting": (config.data.name, config.model.name, int(config.L), float(config.gamma), int(config.seed)),
            "strict": feasibility["status"] == "feasible", "worst_layer": worst, "worst": violations[worst],
            "val_grid": summary["selection_metric"], "val_at_gamma_train": at_gamma_train,
            "test": summary["test_mean_metric"], "steps": summary.get("steps_to_strict_feasibility"),
            "descends": in_distribution["strictly_decreasing"],
            "per_sample_decreasing": in_distribution["fraction_decreasing"],
            "selected_step": summary.get("iterate", {}).get("selected_step"), "test_auc": summary.get("test_auc")}


def read_runs(folders: list[Path]) -> dict[tuple, dict]:
    """The runs under ``folders`` by setting; two runs of one setting are refused (which would stand for it?)."""
    found: dict[tuple, dict] = {}
    for summary_path in sorted(path for folder in folders for path in folder.rglob("summary.json")):
        run = read_run(summary_path.parent)
        if run is None:
            continue
        if run["setting"] in found:
            raise SystemExit(f"compare_runs: two runs of the setting {run['setting']}: {found[run['setting']]['dir']} "
                             f"and {summary_path.parent}; give folders that hold one run a setting")
        found[run["setting"]] = run | {"dir": summary_path.parent}
    return found


def cell(run: dict, digits: int = 2) -> str:
    verdict = "feasible" if run["strict"] else f"misses layer {run['worst_layer']} by {100 * run['worst']:.0f} %"
    return f"{verdict}; val {run['val_grid']:.{digits}f} / {run['val_at_gamma_train']:.{digits}f}"


def totals(name: str, runs: list[dict]) -> str:
    count = len(runs)

    def mean(key: str) -> float:
        return sum(run[key] for run in runs) / count

    return (f"{name}: strictly feasible {sum(run['strict'] for run in runs)} of {count}; mean validation RMSE over "
            f"the grid {mean('val_grid'):.3f}, at gamma_test = gamma_train {mean('val_at_gamma_train'):.3f}; "
            f"test {mean('test'):.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="folders of run records (searched recursively)")
    parser.add_argument("--against", nargs="+", type=Path, metavar="FOLDER",
                        help="folders of the runs to compare with, setting by setting")
    args = parser.parse_args(argv)
    if not args.against:
        print("| data | model | L | γ_train | seed | validation | largest relative violation | selected step "
              "| test AUC | steps to strict feasibility | descends | per-sample ℓ_l < ℓ_{l−1} |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for (data, model, depth, gamma, seed), run in sorted(read_runs(args.folders).items()):
            auc = "—" if run["test_auc"] is None else f"{run['test_auc']:.3f}"
            print(f"| {data} | {model} | {depth} | {gamma:g} | {seed} | {cell(run, 3)} | {100 * run['worst']:+.1f} % "
                  f"(layer {run['worst_layer']}) | {run['selected_step'] or 'last'} | {auc} | "
                  f"{run['steps'] or 'never'} | {run['descends']} | {100 * run['per_sample_decreasing']:.0f} % |")
        return 0
    before, after = read_runs(args.folders), read_runs(args.against)
    shared = sorted(set(before) & set(after))
    if not shared:
        parser.error("no setting (data, model, L, gamma_train, seed) is on both sides")
    print("| data | model | L | γ_train | seed | before | after | steps to strict feasibility |")
    print("|---|---|---|---|---|---|---|---|")
    for setting in shared:
        data, model, depth, gamma, seed = setting
        steps = " → ".join(str(runs[setting]["steps"] or "never") for runs in (before, after))
        print(f"| {data} | {model} | {depth} | {gamma:g} | {seed} | {cell(before[setting])} | "
              f"{cell(after[setting])} | {steps} |")
    print(totals("before", [before[setting] for setting in shared]))
    print(totals("after", [after[setting] for setting in shared]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
