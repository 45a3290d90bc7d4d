"""The plan of a multirun: every run it would start, with its stable id, state and estimated cost, launching nothing.

``python -m cutlab --plan -m model=dust,ut gamma=0,0.09`` prints one line per run. The expansion is
Hydra's own (the basic sweeper's cartesian product of ``hydra.sweeper.params`` and the command line,
and the config loader's per-run composition), so the plan lists exactly the runs ``-m`` starts and
a bad key fails here, before anything runs. A run's id is its folder name under ``paths.runs_dir``,
derived from the overrides that change its result (``hydra.job.config.override_dirname``): the same
command always names the same folders, which is what lets a re-run skip complete runs and resume the rest.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from cutlab.errors import CutlabError
from cutlab.records import read_summary
from cutlab.run_identity import check_same_run

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "conf"
SWEEPS_DIR = REPO / "sweeps"
SWEEP_RECORDS = "_sweeps"  # <runs_dir>/_sweeps/: one folder per sweep invocation (its plan, config and result)


@dataclass
class Command:
    """A ``python -m cutlab`` command line, split into what cutlab reads and what Hydra reads."""

    overrides: list[str]
    config_name: str | None = None
    multirun: bool = False
    plan: bool = False

    def hydra_argv(self) -> list[str]:
        """The command line for one run of this sweep (no -m, no --plan)."""
        return (["--config-name", self.config_name] if self.config_name else []) + list(self.overrides)


def parse_command(argv: list[str]) -> Command | None:
    """The flags cutlab handles itself; None when the command uses another Hydra flag (--cfg, --help, ...)."""
    command = Command(overrides=[])
    args = iter(argv)
    for arg in args:
        if arg in ("-m", "--multirun"):
            command.multirun = True
        elif arg == "--plan":
            command.plan = True
        elif arg in ("-cn", "--config-name"):
            command.config_name = next(args, None)
        elif arg.startswith("--config-name="):
            command.config_name = arg.split("=", 1)[1]
        elif arg.startswith("-"):
            return None
        else:
            command.overrides.append(arg)
    return command


def with_sweeps_dir(argv: list[str]) -> list[str]:
    """sweeps/ joins conf/ on Hydra's search path (as ``--config-dir``), so ``--config-name table3`` finds
    sweeps/table3.yaml; a user's own ``--config-dir`` is kept as given."""
    if any(a in ("-cd", "--config-dir") or a.startswith("--config-dir=") for a in argv):
        return argv
    return ["--config-dir", str(SWEEPS_DIR), *argv]


@dataclass
class PlannedRun:
    index: int
    overrides: list[str]       # this run's overrides, as Hydra hands them to the run
    run_id: str                # its folder name: stable, from the overrides that change the result
    run_dir: Path
    status: str                # new | complete | running | interrupted | failed (its summary.json) | refused
    steps_done: int = 0
    cost_key: tuple = ()       # runs with the same key cost the same (model, data, depth, arm, budget)


@dataclass
class Plan:
    name: str                  # the sweep's name: its config name, or a hash of its command line
    command: Command
    runs_dir: Path
    runs: list[PlannedRun] = field(default_factory=list)
    config_yaml: str = ""      # the sweep's composed config (hydra section included), for the record
    launcher: dict = field(default_factory=dict)  # the composed launcher group (conf/launcher/*.yaml)

    @property
    def to_run(self) -> list[PlannedRun]:
        return [run for run in self.runs if run.status != "complete"]


def sweep_name(command: Command) -> str:
    """The config name of a sweep file, or ``sweep-<hash>`` of the command's result-changing overrides."""
    if command.config_name and command.config_name != "config":
        return Path(command.config_name).stem
    kept = sorted(o for o in command.overrides if not o.lstrip("+~").startswith(("launcher", "hydra.", "wandb.")))
    return "sweep-" + hashlib.sha1(" ".join(kept).encode()).hexdigest()[:8]


def expand(command: Command) -> Plan:
    """Hydra's expansion of ``command`` into runs (nothing is launched or written)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from cutlab.__main__ import register_resolvers

    register_resolvers()
    GlobalHydra.instance().clear()
    search_path = create_config_search_path(str(CONFIG_DIR))
    search_path.prepend("command-line", f"file://{SWEEPS_DIR}")  # what --config-dir does (with_sweeps_dir)
    hydra = Hydra.create_main_hydra2(task_name="cutlab", config_search_path=search_path)
    overrides = list(command.overrides)
    try:
        cfg = hydra.compose_config(command.config_name or "config", overrides, run_mode=RunMode.MULTIRUN,
                                   with_log_configuration=False)
        params = [f"{key}={value}" for key, value in (cfg.hydra.sweeper.get("params") or {}).items()]
        task_overrides = OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False)
        parsed = OverridesParser.create(config_loader=hydra.config_loader).parse_overrides(params + task_overrides)
        jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
        if not jobs:
            raise CutlabError(_empty_sweep_message(parsed))
        plan = Plan(sweep_name(command), command, Path(cfg.paths.runs_dir), config_yaml=OmegaConf.to_yaml(cfg),
                    launcher=OmegaConf.to_container(cfg.launcher, resolve=True))
        composer = _JobComposer(hydra.config_loader, cfg, OverridesParser.create(config_loader=hydra.config_loader))
        for index, job_overrides in enumerate(jobs):
            job, run_dir = composer.compose(list(job_overrides))
            plan.runs.append(PlannedRun(index, list(job_overrides), run_dir.name, run_dir,
                                        *_state(run_dir, job), cost_key=_cost_key(job)))
    except (HydraException, OmegaConfBaseException) as error:
        raise CutlabError(_composition_message(error)) from None
    finally:
        GlobalHydra.instance().clear()
    _check_unique_ids(plan)
    return plan


class _JobComposer:
    """Each run's config as Hydra composes it, composing the defaults list once per choice of config groups.

    Hydra composes every run from scratch (about 0.1 s each; 20 s for Table 3). Runs that choose the same
    groups differ only in plain key=value overrides, so those are applied, with Hydra's own override
    code, to a copy of one composed config, and the folder name is computed as Hydra computes it.
    """

    def __init__(self, config_loader, master, parser) -> None:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname

        self.loader, self.master, self.parser = config_loader, master, parser
        self.groups = set(master.hydra.runtime.choices.keys())
        self.naming = master.hydra.job.config.override_dirname
        self.apply, self.dirname = ConfigLoaderImpl._apply_overrides_to_config, get_overrides_dirname
        self.composed: dict[tuple[str, ...], tuple] = {}
        self.current = None

    def compose(self, job_overrides: list[str]) -> tuple[dict, Path]:
        """The run's resolved config (without Hydra's section) and its folder."""
        import copy

        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf, open_dict

        from cutlab.run_naming import run_name

        parsed = self.parser.parse_overrides(job_overrides)
        plain = [o for o in parsed if o.key_or_group not in self.groups and o.package is None and "/" not in o.key_or_group]
        choices = tuple(o.input_line for o in parsed if o not in plain)
        if choices not in self.composed:
            full = self.loader.load_sweep_config(self.master, list(choices))
            with open_dict(full):
                hydra_node = full.pop("hydra")
            OmegaConf.set_struct(full, True)  # as Hydra applies overrides: an unknown key is an error
            self.composed[choices] = (full, OmegaConf.create({"hydra": hydra_node}))
        app, hydra_cfg = self.composed[choices]
        app = copy.deepcopy(app)
        self.apply(plain, app)
        if self.current is not hydra_cfg:  # for ${hydra:...} in the app config (paths.data_dir)
            HydraConfig.instance().set_config(hydra_cfg)
            self.current = hydra_cfg
        job = OmegaConf.to_container(app, resolve=True)  # resolves every key: a bad value fails now, not mid-sweep
        dirname = self.dirname(overrides=parsed, exclude_keys=list(self.naming.exclude_keys),
                               item_sep=self.naming.item_sep, kv_sep=self.naming.kv_sep)
        return job, Path(job["paths"]["runs_dir"]) / run_name(job.get("run_name"), dirname)


def _empty_sweep_message(parsed) -> str:
    empty = [o.input_line for o in parsed if o.is_sweep_override() and not list(o.sweep_string_iterator())]
    where = f" ({', '.join(empty)} has no values)" if empty else ""
    return f"the sweep expands to no runs{where}; give each swept key at least one value, e.g. gamma=0,0.09"


def _composition_message(error: Exception) -> str:
    text = str(error).strip().splitlines()[0].rstrip(".") if str(error).strip() else type(error).__name__
    if "Could not find" in text or "Cannot find primary config" in text:
        fix = "choose a config that exists under conf/ (or sweeps/ for --config-name)"
    else:
        fix = "check the key against conf/ (python -m cutlab --cfg job shows every key); a new key needs a leading +"
    return f"the sweep cannot be composed before any run starts: {text}; {fix}"


def _check_unique_ids(plan: Plan) -> None:
    seen: dict[str, PlannedRun] = {}
    for run in plan.runs:
        if run.run_id in seen:
            raise CutlabError(
                f"runs {seen[run.run_id].overrides} and {run.overrides} would share the folder {run.run_id}: "
                "a swept key is excluded from folder names (hydra.job.config.override_dirname.exclude_keys); "
                "sweep a key that changes the result, or give each run its own run_name")
        seen[run.run_id] = run


def _state(run_dir: Path, job: dict) -> tuple[str, int]:
    """The run's status from its summary.json; ``refused`` when its folder holds another configuration or files that
    are not a run record (running it says why, in one line), so that it is never counted as complete."""
    try:
        check_same_run(run_dir, job)
        summary = read_summary(run_dir)
    except CutlabError:
        return "refused", 0
    if summary is None:
        return "new", 0
    steps = summary.get("steps")
    return str(summary.get("status", "new")), steps if isinstance(steps, int) and steps >= 0 else 0


def _cost_key(job: dict) -> tuple:
    """What a run's cost depends on: model, data, depth, arm and budget (not gamma, seed or learning rates)."""
    data = {k: v for k, v in job.get("data", {}).items() if k != "root"}
    train = job.get("train", {})
    return (job.get("model", {}).get("name"), json.dumps(data, sort_keys=True, default=str), job.get("L"),
            train.get("constrained"), train.get("epochs"), train.get("max_steps_per_epoch"), train.get("batch_size"),
            len(job.get("eval", {}).get("gamma_test", [])))


# ----------------------------------------------------------------------------------------------- cost
def measured_costs(runs_dir: Path) -> dict[tuple, list[float]]:
    """Wall time of every complete run under ``runs_dir``, by cost key (from its config.yaml and summary.json)."""
    import yaml  # a stored config.yaml is already resolved: plain YAML, parsed ~10x faster than by OmegaConf

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    costs: dict[tuple, list[float]] = {}
    if not runs_dir.is_dir():
        return costs
    for summary_path in runs_dir.glob("*/summary.json"):
        try:
            summary = json.loads(summary_path.read_text())
            if summary.get("status") != "complete" or not summary.get("wall_time_s"):
                continue
            config = yaml.load((summary_path.parent / "config.yaml").read_text(), Loader=loader)
            key, seconds = _cost_key(config), float(summary["wall_time_s"])
        except Exception:  # a half-written or foreign folder says nothing about cost
            continue
        costs.setdefault(key, []).append(seconds)
    return costs


PROCESS_STARTUP_S = 3.3  # python + torch + Hydra start-up of one run (../shared/notes/stack.md, 2 idle cores)


@dataclass
class Estimate:
    seconds: float             # summed run time of the runs still to do, where measured
    measured: int              # runs to do with a measured peer (same model, data, depth, arm and budget)
    unmeasured: list[PlannedRun]


def estimate(plan: Plan) -> Estimate:
    """Run time of what is left, from complete runs of the same kind already in the runs folder.

    A run's cost is the median ``wall_time_s`` (training and evaluation) of complete runs with its cost
    key. Runs of a kind never run before are counted as unmeasured: run one of each kind first to
    calibrate the estimate. Launchers that start a process per run (SLURM; local with warm_workers=false) add
    its start-up (PROCESS_STARTUP_S); the local launcher's warm workers pay it once each, not per run.
    """
    costs = measured_costs(plan.runs_dir)
    seconds, measured, unmeasured = 0.0, 0, []
    for run in plan.to_run:
        peers = costs.get(run.cost_key)
        if not peers:
            unmeasured.append(run)
            continue
        measured += 1
        seconds += statistics.median(peers)
    return Estimate(seconds, measured, unmeasured)


def format_plan(plan: Plan, launcher: str, parallel: int) -> str:
    """The plan as printed by ``--plan``: one line per run, then the totals and the estimate."""
    lines = [f"# sweep {plan.name}: {len(plan.runs)} runs into {plan.runs_dir} (launcher: {launcher})"]
    width = len(str(len(plan.runs)))
    for run in plan.runs:
        note = f" (resumes at step {run.steps_done})" if run.status in ("running", "interrupted", "failed") and run.steps_done else ""
        lines.append(f"{run.index:>{width}} {run.status:<11} {run.run_id}{note}")
    done = len(plan.runs) - len(plan.to_run)
    cost = estimate(plan)
    if launcher == "slurm" or (launcher == "local" and not plan.launcher.get("warm_workers", True)):
        cost.seconds += PROCESS_STARTUP_S * cost.measured
    lines.append(f"# {done} complete (skipped), {len(plan.to_run)} to run")
    if plan.to_run:
        wall = cost.seconds / max(1, min(parallel, len(plan.to_run)))
        measured = (f"estimated {_duration(cost.seconds)} of run time for the {cost.measured} measured runs "
                    f"(about {_duration(wall)} of wall time with {parallel} in parallel)")
        lines.append(f"# {measured}" if cost.measured else "# no run of these kinds has completed in this folder yet")
        if cost.unmeasured:
            kinds = {run.cost_key: run for run in cost.unmeasured}
            example = [*plan.command.hydra_argv()[:2 if plan.command.config_name else 0],
                       *(o for o in next(iter(kinds.values())).overrides if not o.startswith("wandb.group="))]
            lines.append(f"# {len(cost.unmeasured)} runs of {len(kinds)} kinds not measured; to calibrate, run one "
                         f"of each first, e.g. python -m cutlab {' '.join(example)}")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
