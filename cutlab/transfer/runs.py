"""The finished runs a ``cutlab-eval`` command names, and their final weights."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from cutlab.run.checkpoints import load_checkpoint
from cutlab.run.identity import model_source_change, stored_config
from cutlab.run.lock import live_holder
from cutlab.errors import CutlabError
from cutlab.interrupted import ctrl_c_held
from cutlab.run.records import CHECKPOINT, CONFIG, PROVENANCE, SUMMARY, read_summary
from cutlab.tasks.models import builds_a_model

#: subfolders that never hold runs: evaluation records, W&B's files, sweep records, caches
NOT_RUNS = {"evaluations", "wandb", "_sweeps", "__pycache__"}
GLOB_CHARACTERS = "*?["
#: the sections of a run's config.yaml that its evaluation is rebuilt from (cutlab.transfer.config, .evaluate)
SECTIONS = ("data", "model", "train", "eval", "paths")


def find_runs(patterns: list[str]) -> list[Path]:
    """Every run folder named by ``patterns``: a run folder, a folder of runs (searched recursively), or a glob."""
    found: list[Path] = []
    for pattern in patterns:
        if not pattern.strip():  # "$RUN" unset: Path('') would evaluate every run under the current folder
            raise CutlabError("a run given is empty; pass a run folder, a folder of runs or a glob, e.g. "
                              "cutlab-eval runs/my_run")
        path = Path(pattern)
        if path.exists() or not any(character in pattern for character in GLOB_CHARACTERS):
            matches = [path]
        else:
            matches = sorted(Path(match) for match in _glob(pattern))
            if not matches:
                raise CutlabError(f"no folder matches {pattern!r}; pass a run folder, a folder of runs, or a glob "
                                  "that matches run folders (quote it so the shell leaves it to cutlab-eval)")
        for match in matches:
            found += runs_under(match)
    return list(dict.fromkeys(path.resolve() for path in found))


def _glob(pattern: str) -> list[str]:
    import glob

    return glob.glob(os.path.expanduser(pattern))


def runs_under(path: Path) -> list[Path]:
    """``path`` if it is a run folder, else the run folders below it; a clear error when there are none."""
    if not path.exists():
        raise CutlabError(f"no run folder at {path}; pass the folder python -m cutlab wrote a run into (under runs/ or "
                          "$CUTLAB_RUNS_DIR), a folder of runs, or a glob of them")
    if not path.is_dir():
        raise CutlabError(f"{path} is a file, not a run folder; pass the folder that holds {CONFIG} and {SUMMARY}")
    if _is_run(path):
        return [path]
    found = []
    for current, dirs, _files in os.walk(path):
        if _is_run(Path(current)):
            found.append(Path(current))
            dirs[:] = []  # a run's subfolders are its own (W&B files, evaluation records)
            continue
        dirs[:] = sorted(d for d in dirs if d not in NOT_RUNS and not d.startswith("."))
    if not found:
        raise CutlabError(f"{path} holds no run (no folder with {CONFIG} or {SUMMARY}); pass the folder python -m "
                          "cutlab wrote its runs into")
    return found


def interpolations(node, prefix: str = "") -> list[str]:
    """``key: value`` of every string in a stored config that OmegaConf would resolve (``${...}``)."""
    if isinstance(node, dict):
        return [found for key, value in node.items() for found in interpolations(value, f"{prefix}{key}.")]
    if isinstance(node, list):
        return [found for index, value in enumerate(node) for found in interpolations(value, f"{prefix}{index}.")]
    return [f"{prefix.rstrip('.')}: {node}"] if isinstance(node, str) and "${" in node else []


def check_model_target(run_dir: Path, config: DictConfig) -> None:
    """The stored ``model._target_`` is called with the stored model keys as its arguments: only a model builder may
    be (a folder from elsewhere naming ``os.system`` with ``command: ...`` ran that command before)."""
    target = config.model.get("_target_")
    if target is not None and not builds_a_model(str(target)):
        raise CutlabError(f"{run_dir / CONFIG} names model._target_={target}, which is not a LayerwiseModel class nor "
                          "a function declared to return one, so cutlab-eval will not call it; if it is the function "
                          "that builds your model, annotate its return type (-> LayerwiseModel), else copy the run "
                          "folder again from where it was trained")


def check_model_source(run_dir: Path, config: DictConfig) -> None:
    """A model of the user's own is rebuilt from its module as it is now: other code than the run was trained with
    would give other numbers for the same weights (cutlab.run.identity.model_source_change)."""
    changed = model_source_change(run_dir, str(config.model._target_), "was trained",
                                  fix="copy the run folder again from where it was trained")
    if changed:
        raise CutlabError(f"{run_dir.name}: {changed}, so other code would evaluate its weights; restore that file as "
                          f"it was trained (its sha256 is in the run's {PROVENANCE}), or train the run again")


def _is_run(path: Path) -> bool:
    return (path / CONFIG).is_file() or (path / SUMMARY).is_file()


def finished_run(run_dir: Path) -> tuple[DictConfig, dict, dict]:
    """The run's config, summary and final checkpoint; a run that is not finished is refused in one line.

    The checkpoint is read with ``weights_only=True`` (cutlab.run.checkpoints): a folder from elsewhere cannot run code.
    """
    summary = read_summary(run_dir, fix=f"delete it and run this run's python -m cutlab command again, which rewrites "
                                        f"it from {CHECKPOINT} without training again; then evaluate it")
    status = summary.get("status") if summary is not None else None
    holder = live_holder(run_dir) if status != "complete" else None
    if holder:  # its own command again would be refused at the run's lock while that process lives
        raise CutlabError(f"{run_dir.name} is being trained now by {holder}: its weights are not final yet; evaluate "
                          "it once that process ends")
    if summary is None:
        raise CutlabError(f"{run_dir.name} has no {SUMMARY}: the run never started training; train it with "
                          "python -m cutlab first, then evaluate it")
    if status != "complete":
        raise CutlabError(f"{run_dir.name} is not finished (status {status!r}): its weights are not final; run its "
                          "python -m cutlab command again to finish it, then evaluate it")
    if not (run_dir / CONFIG).is_file():
        raise CutlabError(f"{run_dir.name} has no {CONFIG}, so its model cannot be rebuilt; copy the whole run folder")
    # python -m cutlab's own check (not YAML, not UTF-8, or not a mapping: an empty file, a list), in one line
    stored = stored_config(run_dir, fix="copy the run folder again from where it was trained")
    missing = [key for key in SECTIONS if not isinstance(stored.get(key), dict)]
    if missing:  # a mapping, but not the resolved config python -m cutlab writes
        raise CutlabError(f"{run_dir / CONFIG} is not a run config: it has no {', '.join(missing)} section; copy the "
                          "run folder again from where it was trained")
    found = interpolations(stored)
    if found:  # resolved as the config is read: ${oc.env:VAR} put that variable's value into the evaluation's record
        raise CutlabError(f"{run_dir / CONFIG} holds interpolations ({found[0]}), which a run's resolved config never "
                          "does, so it is not read; copy the run folder again from where it was trained")
    try:
        with ctrl_c_held():  # else a Ctrl-C landing inside OmegaConf is reported as this run's unreadable config
            config = OmegaConf.create(stored)
    except Exception as error:  # omegaconf's own errors (a key it cannot hold)
        raise CutlabError(f"{run_dir / CONFIG} is not a readable config ({type(error).__name__}); copy the run "
                          "folder again from where it was trained") from None
    check_model_target(run_dir, config)
    check_model_source(run_dir, config)
    checkpoint = load_checkpoint(run_dir)
    if checkpoint is None:
        raise CutlabError(f"{run_dir.name} has no {CHECKPOINT}: its final weights were not kept (or not copied); "
                          "copy the whole run folder, or train it again")
    steps = checkpoint["trainer"].get("progress", {}).get("step") if isinstance(checkpoint["trainer"], dict) else None
    if summary.get("steps") is not None and steps != summary["steps"]:
        raise CutlabError(f"{run_dir / CHECKPOINT} holds step {steps} but the run ended at step {summary['steps']}: "
                          "these are not its final weights; copy the run folder again from where it was trained")
    return config, summary, checkpoint
