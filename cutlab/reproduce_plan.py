"""``cutlab-reproduce --plan``: every run of a scale, its state and cost, grid by grid, launching nothing.

Each grid is planned by the sweep layer itself (``cutlab.launch.plan.expand``, what ``python -m cutlab --plan``
prints), so the ids, states and estimates are the ones the runs will have. Grids whose dataset or checkpoint is
missing are planned too and listed as ``skipped``, with the flag that supplies the input.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cutlab.config.launcher import check_launcher_node
from cutlab.core.progress import Meter, counted
from cutlab.errors import CutlabError
from cutlab.launch.cost import PROCESS_STARTUP_S, estimate
from cutlab.launch.pasted import pasted_command
from cutlab.launch.plan import Plan, _duration, expand, format_plan, parse_command
from cutlab.launch.sweep import sbatch_preview
from cutlab.reproduce_grids import SCALES, Grid, grids, sweep_params
from cutlab.reproduce_inputs import WEIGHTS, Inputs

PLAN_LINE_EVERY_S = 5.0  # --plan's lines while it composes: sooner than a run's, since its output waits on it

@dataclass
class ScaleGrid:
    grid: Grid
    argv: list[str]           # python -m cutlab <argv>
    skipped: str | None       # why it does not run here, naming the flag that supplies the input
    plan: Plan | None = None  # filled by expand_all


def resolve(scale: str, inputs: Inputs, runs_dir: Path, extra: list[str]) -> list[ScaleGrid]:
    """The scale's grids with the locations of their inputs, or the reason each missing one is skipped."""
    result, data_cache, model_cache = [], {}, {}
    scale_grids = [grid for entry in SCALES[scale] for grid in grids(entry)]
    _check_not_an_axis(scale, scale_grids, extra)
    _check_inputs_read(scale, scale_grids, inputs)
    for entry in SCALES[scale]:
        # the files its runs read: the sweep's own data.* values (the smoke scale's 100 reviews) over the config's
        files = {key.removeprefix("data."): values[0] for key, values in sweep_params(entry.sweep)[0].items()
                 if key.startswith("data.") and len(values) == 1}
        for grid in (grid for grid in scale_grids if grid.entry == entry):
            # each input checked once (setdefault read them again for every grid: Alpaca's rows, a zip's directory)
            if (grid.data, entry.sweep) not in data_cache:
                data_cache[grid.data, entry.sweep] = inputs.for_data(grid.data, files)
            if grid.model not in model_cache:
                model_cache[grid.model] = inputs.for_model(grid.model)
            data, model = data_cache[grid.data, entry.sweep], model_cache[grid.model]
            reasons = [reason for _, reason in (data, model) if reason]
            argv = [*grid.argv(), *data[0], *model[0], f"paths.runs_dir={runs_dir}", *extra]
            result.append(ScaleGrid(grid, argv, "; ".join(reasons) or None))
    return result


def _check_not_an_axis(scale: str, scale_grids: list, extra: list[str]) -> None:
    """An override of a key the grids sweep or split on (gamma=0.2) would replace the paper's values in every grid,
    silently: the constrained-UT-at-0 grid would run at 0.2, a cell the paper does not have. A setting the sweep
    gives one value (train.epochs, the budget) stays the user's to change."""
    axes = {override.lstrip("+~").partition("=")[0] for grid in scale_grids for override in grid.overrides}
    axes |= {key for grid in scale_grids for key, values in sweep_params(grid.entry.sweep)[0].items() if len(values) > 1}
    for override in extra:
        key = override.lstrip("+~").partition("=")[0]
        if key == "paths.runs_dir":  # the runs went there while the report read --out's runs/: a report of none
            raise CutlabError(f"{override}: the scale's runs go to runs/ under --out, where its report reads them; "
                              "give --out DIR instead")
        if key in axes:
            raise CutlabError(f"{key} is set by the {scale} scale's grids (they set or sweep {', '.join(sorted(axes))}), "
                              f"and {override} would replace its values in every grid; run a grid of your own with "
                              f"python -m cutlab -m ... {override}, or leave it out")


def _check_inputs_read(scale: str, scale_grids: list, inputs: Inputs) -> None:
    """A --data or --weights that no grid of the scale reads (--data ucsd_ped1=... at the paper scale, whose Table 3
    reads Avenue, ShanghaiTech and Ped2) was accepted and ignored without a word."""
    datasets = sorted({grid.data for grid in scale_grids})
    models = {grid.model for grid in scale_grids}
    for name, value in inputs.data.items():
        if name == "synthetic":  # generated in memory: a path given for it was accepted and never read
            raise CutlabError(f"--data synthetic={value}: the synthetic video is generated, not read from files; drop it")
        if name not in datasets:
            raise CutlabError(f"--data {name}={value}: no grid of the {scale} scale reads {name} (they read "
                              f"{', '.join(datasets)}); drop it, or train on it with python -m cutlab data={name} ...")
    for name, value in inputs.weights.items():
        if WEIGHTS[name].model not in models:
            raise CutlabError(f"--weights {name}={value}: no grid of the {scale} scale runs model="
                              f"{WEIGHTS[name].model}; drop it")


def expand_all(planned: list[ScaleGrid]) -> None:
    """Each grid's plan. The paper scale composes about a thousand configs (half a minute on 2 cores, with nothing
    said): a line on stderr every few seconds, grids planned and the time left, none for a quick pass."""
    meter = Meter("planning", len(planned), "grid", bar=False, prefix="cutlab-reproduce: ", every_s=PLAN_LINE_EVERY_S,
                  first_line=False)
    for index, item in enumerate(planned):
        meter.update(index)  # what is done before each grid, never the total: a quick pass prints nothing
        item.plan = expand(parse_command(item.argv))


def format_scale_plan(scale: str, planned: list[ScaleGrid]) -> str:
    """The whole plan: per table or figure its grids (runs, states, estimates, sbatch scripts) and totals."""
    # the launcher check a sweep's launch makes, so the plan refuses what the launch would
    launcher = next((check_launcher_node(item.plan.launcher) for item in planned), "inprocess")
    lines = [f"# cutlab-reproduce --scale {scale} --plan (launcher: {launcher}); nothing is started"]
    if launcher == "slurm" and scale == "paper":
        _, profile = _parallel(planned[0].plan, launcher)
        if not profile.gpus_per_node:  # the default profile: a CPU job of 1 core and 4 GB, which these runs outgrow
            cores = f"{profile.cpus_per_task} core{'s' if profile.cpus_per_task != 1 else ''}"
            lines.append(f"# note: the SLURM profile {profile.name} asks no GPU ({cores}, "
                         f"{profile.mem_gb} GB, {profile.timeout_min} min a job); the paper's runs want "
                         "launcher.profile=gpu (slurm/gpu.yaml) or a profile of your own")
    totals, counted = _Tally(), set()  # the total counts each run folder once
    for entry in SCALES[scale]:
        items = [item for item in planned if item.grid.entry == entry]
        tally = _Tally()
        lines.append(f"## {entry.label} (sweeps/{entry.sweep}.yaml)")
        for item in items:
            lines.append("# command: " + pasted_command(item.argv))  # pasted into a shell as printed
            # e.g. Fig 3's L in {3, 5, 7} cells are Table 3's runs: one folder, run once
            first_seen = [run for run in item.plan.runs if run.run_dir not in counted]
            counted |= {run.run_dir for run in item.plan.runs}
            if item.skipped:
                lines.append(f"# skipped: {len(item.plan.runs)} runs of data={item.grid.data} model={item.grid.model}: "
                             f"{item.skipped}")
                width = len(str(len(item.plan.runs)))
                lines += [f"{run.index:>{width}} {'skipped':<11} {run.run_id}" for run in item.plan.runs]
                tally.skipped += len(item.plan.runs)
                totals.skipped += len(first_seen)
                continue
            parallel, profile = _parallel(item.plan, launcher)
            lines.append(format_plan(item.plan, launcher, parallel))
            if profile is not None:
                lines.append(sbatch_preview(item.plan, profile))  # as python -m cutlab --plan shows it
            tally.add(item.plan, launcher, item.plan.runs)
            totals.add(item.plan, launcher, first_seen)
        lines.append(f"# {entry.label}: {tally.text()}")
    listed = sum(len(item.plan.runs) for item in planned)
    shared = listed - len(counted)
    lines.append(f"# total: {totals.text()}")
    if shared:
        lines.append(f"# {listed} runs are listed above: {shared} belong to two grids (one folder each) and count once")
    return "\n".join(lines)


class _Tally:
    def __init__(self) -> None:
        self.runs = self.complete = self.refused = self.busy = self.skipped = self.measured = 0
        self.seconds, self.kinds, self.unmeasured = 0.0, set(), 0

    def add(self, plan: Plan, launcher: str, runs: list) -> None:
        """Count ``runs`` (some or all of ``plan``'s), costing the ones not complete."""
        folders = {run.run_dir for run in runs}
        to_run = [run for run in plan.to_run if run.run_dir in folders]
        cost = estimate(plan.runs_dir, to_run)
        self.runs += len(runs)
        self.complete += sum(run.status == "complete" for run in runs)
        self.refused += sum(run.status == "refused" for run in runs)  # not launched: failed (format_plan says why)
        self.busy += sum(run.status == "busy" for run in runs)  # another live process writes it: left to it
        self.measured += cost.measured
        # as format_plan: a process per run (SLURM, local without warm workers) pays the start-up per run
        startup = launcher == "slurm" or (launcher == "local" and not plan.launcher.get("warm_workers", True))
        self.seconds += cost.seconds + (PROCESS_STARTUP_S * cost.measured if startup else 0)
        self.unmeasured += len(cost.unmeasured)
        self.kinds |= {run.cost_key for run in cost.unmeasured}

    def text(self) -> str:
        to_run = self.runs - self.complete - self.refused - self.busy
        text = f"{self.runs + self.skipped} runs: {to_run} to run, {self.complete} complete, " \
               + (f"{self.refused} refused, " if self.refused else "") + (f"{self.busy} busy, " if self.busy else "") \
               + f"{self.skipped} skipped; "
        # no run of a kind measured yet: no estimate, rather than "0 s of run time", which reads as no cost
        text += (f"estimated {_duration(self.seconds)} of run time for the {self.measured} measured runs"
                 if self.measured else "no estimate yet")
        if self.unmeasured:
            text += (f", {counted(self.unmeasured, 'run')} of {counted(len(self.kinds), 'kind')} not measured yet (run "
                     "one of each to calibrate)")
        return text


def _parallel(plan: Plan, launcher: str):
    if launcher == "slurm":
        from cutlab.launch.slurm_profile import slurm_settings

        profile = slurm_settings(plan.launcher)
        return profile.array_parallelism, profile
    return (plan.launcher.get("max_parallel", 1) if launcher == "local" else 1), None
