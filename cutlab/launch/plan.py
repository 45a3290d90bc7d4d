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
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cutlab.config.checks import check_config, check_run_folder, check_runs_dir, runs_dir_path
from cutlab.config.compose import (JobComposer, check_is_override, composition_message, hydra_quoted, main_hydra,
                                   resolve_given, several_values)
from cutlab.config.launcher import is_launcher_override
from cutlab.config.naming import check_composed_folders
from cutlab.config.neutral import is_result_neutral_override
from cutlab.core.progress import counted
from cutlab.errors import CutlabError
from cutlab.interrupted import ctrl_c_held
from cutlab.redaction import redact
from cutlab.launch.cost import PROCESS_STARTUP_S, cost_key, estimate
from cutlab.launch.pasted import pasted_command
from cutlab.run.records import CHECKPOINT, read_summary
from cutlab.run.identity import check_same_run, configuration_key
from cutlab.run.lock import live_holder


@dataclass
class Command:
    """A ``python -m cutlab`` command line, split into what cutlab reads and what Hydra reads."""

    overrides: list[str]
    config_name: str | None = None
    config_dir: str | None = None  # --config-dir: a folder of the user's own configs (absolute), e.g. their model's yaml
    multirun: bool = False
    plan: bool = False

    def config_flags(self) -> list[str]:
        """--config-dir and --config-name as each run of the sweep is given them."""
        return ((["--config-dir", self.config_dir] if self.config_dir else [])
                + (["--config-name", self.config_name] if self.config_name else []))

    def hydra_argv(self) -> list[str]:
        """The command line for one run of this sweep (no -m, no --plan)."""
        return self.config_flags() + list(self.overrides)

    def source(self) -> str:
        """The configs this command composes beyond conf/, as an error names where a value was set."""
        if self.config_name:
            return f"--config-name {self.config_name}" + (f" (in {self.config_dir})" if self.config_dir else "")
        return f"a config of --config-dir {self.config_dir}" if self.config_dir else "conf/"


# Hydra flags cutlab refuses, each with why and what to write instead
REFUSED_FLAGS = {
    "--config-path": "--config-path replaces cutlab's own configs (Hydra's primary config folder), so nothing of "
                     "conf/ is found; add a folder of your own configs or sweep files with --config-dir FOLDER",
    "--experimental-rerun": "--experimental-rerun loads a pickle, which can run any code (cutlab writes none, and "
                            "loads none); to run a run again, run its 'command' from its provenance.json",
}
REFUSED_FLAGS["-cp"] = REFUSED_FLAGS["--config-path"]
# Hydra's flags that look at one run's config instead of running it; with -m, Hydra's ValueError traceback
LOOKING_FLAGS = ("--cfg", "-c", "--info", "-i", "--shell-completion", "-sc", "--resolve", "-p", "--package")


def parse_command(argv: list[str]) -> Command | None:
    """The flags cutlab handles itself; None when the command uses another Hydra flag (--cfg, --help, ...)."""
    for arg in argv:  # wherever they stand: after --cfg or --help too, which Hydra would then read
        if (flag := arg.partition("=")[0]) in REFUSED_FLAGS:
            raise CutlabError(REFUSED_FLAGS[flag])
    looking = [arg for arg in argv if arg.partition("=")[0] in LOOKING_FLAGS]
    sweeping = [arg for arg in argv if arg in ("-m", "--multirun", "--plan")]
    if looking and sweeping:
        raise CutlabError(f"{looking[0]} and {sweeping[0]} do not go together: {looking[0]} looks at one run's config "
                          "(one value per key, no -m); python -m cutlab --plan -m KEY=A,B ... lists a sweep's runs")
    command = Command(overrides=[])
    args = iter(argv)
    for arg in args:
        if arg in ("-m", "--multirun"):
            command.multirun = True
        elif arg == "--plan":
            command.plan = True
        elif flag := config_flag(arg, args):
            if flag[0] == "config_name":
                command.config_name = config_name_of(flag[1])
            else:
                command.config_dir = config_dir_path(flag[1])
        elif arg.startswith("-"):
            return None
        else:
            check_is_override(arg)
            command.overrides.append(arg)
    return command


def config_flag(arg: str, args) -> tuple[str, str | None] | None:
    """("config_name" or "config_dir", its value) when ``arg`` is -cn/--config-name or -cd/--config-dir (the value
    after '=' or the next of ``args``); None otherwise."""
    for name, flags in (("config_name", ("-cn", "--config-name")), ("config_dir", ("-cd", "--config-dir"))):
        if arg in flags:
            return name, next(args, None)
        if arg.startswith(f"{flags[1]}="):
            return name, arg.split("=", 1)[1]
    return None


def config_name_of(name: str | None) -> str | None:
    """--config-name's value; a YAML file's path is refused naming the flags that read it (Hydra looks a name up in
    its search path and said only "Cannot find primary config")."""
    path = Path(name).expanduser() if name else None
    if path is not None and path.suffix in (".yaml", ".yml") and path.is_file():
        raise CutlabError(f"--config-name takes a name, not a file: --config-dir {path.parent} --config-name "
                          f"{path.stem}")
    return name


def config_dir_path(folder: str | None) -> str:
    """The absolute path of --config-dir (each run may start in another process, or on another node)."""
    if not folder or not Path(folder).is_dir():
        raise CutlabError(f"--config-dir {folder or '(no folder given)'} is not a folder; give the folder that holds "
                          "your config groups, e.g. --config-dir my_project/conf (with model/NAME.yaml in it)")
    return str(Path(folder).resolve())


def searchpath_override(config_dir: str | None) -> str:
    """``--config-dir DIR`` as the override a command composes with when it has no Hydra app of its own (cutlab-search,
    cutlab-eval): Hydra's search path, quoted so that a folder name with ',' '=' or brackets stays one path."""
    return f"hydra.searchpath=[{hydra_quoted('file://' + config_dir_path(config_dir))}]"


@dataclass
class PlannedRun:
    index: int
    overrides: list[str]       # this run's overrides, as Hydra hands them to the run
    run_id: str                # its folder name: stable, from the overrides that change the result
    run_dir: Path
    status: str                # new | complete | interrupted | failed (its summary.json) | refused | killed (its
                               # summary says running, and no process holds its folder) | busy (another live process
                               # writes its folder: ``holder``)
    steps_done: int = 0
    cost_key: tuple = ()       # runs with the same key cost the same (model, data, depth, arm, budget)
    holder: str | None = None  # busy: the process writing its folder when planned (cutlab.run.lock.live_holder)
    problem: str | None = None  # refused: why (its folder holds another run, or a value its config checks refuse)
    configuration: str = ""    # its resolved config as one string (cutlab.run.identity.configuration_key); "" for
                               # a run named by run_name, which asks for a run of its own
    job_id: str | None = None  # busy: the SLURM job an earlier sweep left it to, still queued (cutlab.launch.queued)


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
        """The runs a launcher starts (a SLURM array's tasks): neither complete, busy nor refused."""
        return [run for run in self.runs if run.status not in ("complete", "busy", "refused")]

    @property
    def refused(self) -> list[PlannedRun]:
        """Runs whose own checks refuse them: launched by none (a job or a worker's start each, only to stop in one
        line), each recorded failed with its ``problem`` (cutlab.launch.sweep.refused_outcomes)."""
        return [run for run in self.runs if run.status == "refused"]

    @property
    def completed(self) -> int:
        """Runs skipped as complete."""
        return sum(run.status == "complete" for run in self.runs)

    @property
    def busy(self) -> list[PlannedRun]:
        """Runs another live process is writing (an earlier sweep's jobs, whose submitter was stopped): not run again,
        which would only be refused at their folders' lock."""
        return [run for run in self.runs if run.status == "busy"]


def sweep_name(command: Command) -> str:
    """The config name of a sweep file, or ``sweep-<hash>`` of the command's result-changing overrides."""
    if command.config_name and command.config_name != "config":
        return Path(command.config_name).stem
    kept = sorted(o for o in command.overrides if not o.lstrip("+~").startswith(("launcher", "hydra.", "wandb.")))
    return "sweep-" + hashlib.sha1(" ".join(kept).encode()).hexdigest()[:8]


def expand(command: Command) -> Plan:
    """Hydra's expansion of ``command`` into runs (nothing is launched or written)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    overrides = list(command.overrides)
    try:
        with ctrl_c_held() as held, main_hydra(command.config_dir) as hydra:
            cfg = hydra.compose_config(command.config_name or "config", overrides, run_mode=RunMode.MULTIRUN,
                                       with_log_configuration=False)
            check_composed_folders(cfg.hydra, overrides, command.source())
            params = [f"{key}={value}" for key, value in (cfg.hydra.sweeper.get("params") or {}).items()]
            task_overrides = OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False)
            parser = OverridesParser.create(config_loader=hydra.config_loader)
            parsed = parser.parse_overrides(params + task_overrides)
            jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
            if not jobs:
                raise CutlabError(_empty_sweep_message(parsed))
            plan = Plan(sweep_name(command), command, runs_dir_path(cfg.paths.runs_dir),
                        config_yaml=OmegaConf.to_yaml(cfg), launcher=OmegaConf.to_container(cfg.launcher, resolve=True))
            composer = JobComposer(hydra.config_loader, cfg, parser)
            here = plan.launcher.get("name") != "slurm"  # the runs' data and weights must be on this machine
            for index, job_overrides in enumerate(jobs):
                job, run_dir = composer.compose(list(job_overrides))
                status, steps, holder, problem = _state(run_dir, job, here)
                plan.runs.append(PlannedRun(index, list(job_overrides), run_dir.name, run_dir, status, steps,
                                            cost_key=cost_key(job), holder=holder, problem=problem,
                                            configuration=configuration_key(job) if job.get("run_name") is None
                                            else ""))  # named runs of one configuration are asked for (repeats)
                held.stop_if_pressed()  # a plan of thousands of runs takes seconds to compose
    except (HydraException, OmegaConfBaseException) as error:
        raise CutlabError(f"the sweep cannot be composed before any run starts: {composition_message(error)}") from None
    check_runs_dir(plan.runs_dir, writing=not command.plan)
    _check_unique_ids(plan)
    _mark_queued(plan)
    return plan


def _mark_queued(plan: Plan) -> None:
    """Busy: a run an earlier sweep left to a SLURM job still queued (its folder is locked only once it starts)."""
    from cutlab.launch.queued import queued_jobs

    waiting = {run.run_id: run for run in plan.runs if run.status not in ("complete", "busy", "refused")}
    for run_id, job_id in queued_jobs(plan.runs_dir, set(waiting)).items():
        run = waiting[run_id]
        run.status, run.job_id, run.holder = "busy", job_id, f"SLURM job {job_id}, still queued"


def _empty_sweep_message(parsed) -> str:
    empty = [o.input_line for o in parsed if o.is_sweep_override() and not list(o.sweep_string_iterator())]
    where = f" ({', '.join(empty)} has no values)" if empty else ""
    return f"the sweep expands to no runs{where}; give each swept key at least one value, e.g. gamma=0,0.09"


def check_run(command: Command) -> Path:
    """A single run's command composes (Hydra's own multi-line report of an unknown key or a value its grammar cannot
    read, with a hint to add the key with '+', becomes one line; a key added that way would be read by nothing), and
    its paths.runs_dir can hold the run's folder (Hydra makes it, with a traceback when it cannot). Returns that
    paths.runs_dir."""
    from hydra.errors import HydraException
    from hydra.types import RunMode

    try:
        with main_hydra(command.config_dir) as hydra:
            cfg = hydra.compose_config(command.config_name or "config", list(command.overrides), run_mode=RunMode.RUN,
                                       with_log_configuration=False)
            check_composed_folders(cfg.hydra, list(command.overrides), command.source())
            resolve_given(cfg, list(command.overrides))
            runs_dir = runs_dir_path(cfg.paths.runs_dir)
            swept = list(cfg.hydra.sweeper.get("params") or {})
            run_dir = _run_folder(cfg)
    except (HydraException, OmegaConfBaseException) as error:
        # KEY=A,B without -m: Hydra runs a list of values only as a sweep
        several = several_values(error, "add -m to run one run per value (python -m cutlab -m {} ...)")
        raise CutlabError(several or f"the command's config cannot be composed: {composition_message(error)}") from None
    given = {override.lstrip("+~").partition("=")[0] for override in command.overrides}
    if any(key not in given for key in swept):  # Hydra drops a sweep file's params without -m: the base config ran
        raise CutlabError(f"--config-name {command.config_name} is a sweep file (it sweeps {', '.join(swept)}): add "
                          f"-m to run its runs (python -m cutlab -m --config-name {command.config_name} ...; with "
                          f"--plan, to list them), or give {' '.join(f'{key}=...' for key in swept)} for one of them")
    check_runs_dir(runs_dir, writing=not command.plan)
    if run_dir is not None:
        check_run_folder(run_dir)
    _check_values(cfg)
    return runs_dir


def _check_values(cfg: DictConfig) -> None:
    """The run's own first check (check_config, as a sweep's plan makes it of each run) on the config composed here:
    a value it refuses stops the command before Hydra composes the config twice more and readies the run (0.2 s of a
    2 s refusal). A config that resolves only inside the run (its ${hydra:runtime...}) is left to the run."""
    try:
        job = OmegaConf.to_container(OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"]), resolve=True)
    except OmegaConfBaseException:
        return
    check_config(OmegaConf.create(job))


def _run_folder(cfg: DictConfig) -> Path | None:
    """The folder Hydra makes for the single run (hydra.run.dir), or None where its name does not resolve (a run_name
    the run refuses in its own line, cutlab.config.naming)."""
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().set_config(cfg)  # for ${hydra:job.override_dirname}
    try:
        return Path(str(OmegaConf.select(cfg, "hydra.run.dir")))
    except OmegaConfBaseException:
        return None


def _check_unique_ids(plan: Plan) -> None:
    seen: dict[str, PlannedRun] = {}
    configurations: dict[str, PlannedRun] = {}
    for run in plan.runs:
        twin = configurations.setdefault(run.configuration, run) if run.configuration else run
        if twin is not run and twin.run_id != run.run_id:  # the same run trained twice, counted as two in a cell
            raise CutlabError(f"the runs {twin.run_id} and {run.run_id} compose the same configuration, which would "
                              "be trained twice, in two folders; give each swept value once, spelled one way")
        if run.run_id in seen:
            first = seen[run.run_id].overrides
            if first == run.overrides:
                raise CutlabError(f"the sweep lists the run {run.run_id} twice: give each swept value once")
            shared = f"runs {' '.join(_as_typed(first))} and {' '.join(_as_typed(run.overrides))} would share the " \
                     f"folder {run.run_id}: "
            if all(is_result_neutral_override(o) for o in set(first) ^ set(run.overrides)):  # what sets them apart
                raise CutlabError(shared + "a swept key is left out of folder names, as a key that does not change a "
                                  "run's result (cutlab/config/neutral.py); sweep a key that changes the result")
            # eval.batch_size: left out of folder names, yet another value is another evaluation (its noise)
            raise CutlabError(shared + "the swept key is left out of folder names, yet its values evaluate apart "
                              "(cutlab/config/neutral.py); run each value as a command of its own, with its own "
                              "run_name=")
        seen[run.run_id] = run


def _as_typed(overrides: list[str]) -> list[str]:
    """A run's overrides without the W&B group the sweep adds to every run (launch.sweep.with_sweep_group)."""
    return [o for o in overrides if not o.startswith("wandb.group=")]


def _state(run_dir: Path, job: dict, here: bool) -> tuple[str, int, str | None, str | None]:
    """The run's status from its summary.json; ``refused`` (with why) when its folder holds another configuration or
    files that are not a run record, or when its config has a value the run's own checks refuse (gamma=-1): running
    it says the same in one line, and it is never counted as complete; so is a file or dead link at its folder."""
    try:
        check_config(OmegaConf.create(job), folders=here)  # SLURM's jobs may run where the data are, not here
        check_run_folder(run_dir)
        check_same_run(run_dir, job)
        summary = read_summary(run_dir, resumable=True)
    except CutlabError as error:
        return "refused", 0, None, str(error)
    steps = summary.get("steps") if summary else 0
    steps = steps if isinstance(steps, int) and steps >= 0 else 0
    status = str(summary.get("status", "new")) if summary else "new"
    holder = live_holder(run_dir) if status != "complete" else None
    if status == "running" and not holder:  # its process died without a word (kill -9, a lost node): not running
        status = "killed"
    return ("busy" if holder else status), steps, holder, None


def format_plan(plan: Plan, launcher: str, parallel: int) -> str:
    """The plan as printed by ``--plan``: one line per run, then the totals and the estimate."""
    lines = [f"# sweep {plan.name}: {len(plan.runs)} runs into {plan.runs_dir} (launcher: {launcher})"]
    width = len(str(len(plan.runs)))
    for run in plan.runs:
        resumes = run.status in ("interrupted", "failed") and run.steps_done
        note = f" (resumes at step {run.steps_done})" if resumes else ""
        if run.status == "killed":  # its summary says no step: the checkpoint holds it
            note = (" (its process died: resumes from its checkpoint)" if (run.run_dir / CHECKPOINT).exists()
                    else " (its process died before its first checkpoint: starts again)")
        note = f" (written now by {run.holder}: not run again)" if run.status == "busy" else note
        note = f" (not launched: {redact(run.problem)})" if run.status == "refused" and run.problem else note
        lines.append(f"{run.index:>{width}} {run.status:<11} {run.run_id}{note}")
    refused, runnable = plan.refused, plan.to_run
    cost = estimate(plan.runs_dir, runnable)
    if launcher == "slurm" or (launcher == "local" and not plan.launcher.get("warm_workers", True)):
        cost.seconds += PROCESS_STARTUP_S * cost.measured
    busy = f", {len(plan.busy)} busy (another process writes them)" if plan.busy else ""
    refused_text = f", {len(refused)} refused (not launched, each recorded failed: see above)" if refused else ""
    lines.append(f"# {plan.completed} complete (skipped), {len(runnable)} to run{refused_text}{busy}")
    if runnable:
        wall = cost.seconds / max(1, min(parallel, cost.measured))  # the measured runs alone, spread over the slots
        measured = (f"estimated {_duration(cost.seconds)} of run time for the {cost.measured} measured runs "
                    f"(about {_duration(wall)} of wall time with {parallel} in parallel)")
        lines.append(f"# {measured}" if cost.measured else "# no run of these kinds has completed in this folder yet")
        if cost.unmeasured:
            kinds = {run.cost_key: run for run in cost.unmeasured}
            example = [*plan.command.config_flags(),
                       *(o for o in _as_typed(next(iter(kinds.values())).overrides) if not is_launcher_override(o))]
            lines.append(f"# {counted(len(cost.unmeasured), 'run')} of {counted(len(kinds), 'kind')} not measured; "
                         "to calibrate, run one "
                         f"of each first, e.g. {pasted_command(example)}")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
