"""Stable run folders: the same command always names the same folder, so a re-run resumes or skips it."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from cutlab.config.paths import CONFIG_DIR
from cutlab.errors import CutlabError

MAX_NAME = 200  # well under the 255-byte limit of common filesystems
UNSET = (None, "", "None", "null")
UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]")  # what a folder name made from the overrides replaces with '_'
# Hydra's own folder keys: cutlab names each run's folder (conf/config.yaml's hydra.run.dir and hydra.sweep.subdir)
# and each sweep's record folder (hydra.sweep.dir) itself
HYDRA_FOLDER_KEYS = ("hydra.run", "hydra.run.dir", "hydra.sweep", "hydra.sweep.dir", "hydra.sweep.subdir")
# and every key below these: how Hydra spells a run's overrides as its folder name (kv_sep, item_sep, exclude_keys)
HYDRA_FOLDER_NAMING = ("hydra.job.config.override_dirname", "hydra.job.override_dirname")


def check_run_name(explicit) -> None:
    """``run_name`` must name one folder inside the runs folder: ``..``, ``.`` or a path would write elsewhere
    (the parent of the runs folder, or the runs folder itself, hiding every other run from the analysis)."""
    if explicit not in UNSET:
        check_folder_name("run_name", explicit, "the run's folder inside paths.runs_dir", "ped2_baseline")
        name = str(explicit)
        unsafe = "".join(sorted(set(UNSAFE.findall(name))))
        if unsafe:  # replaced, 'é日本' and 'ü日本' would both be '___': one folder, the second run skipped as the first
            example = UNSAFE.sub("_", name).strip("_") or "ped2_baseline"
            raise CutlabError(f"run_name={name!r} holds {unsafe!r}, which a run's folder name leaves out; use letters, "
                              f"digits and . _ = , + -, e.g. run_name={example}")


def check_folder_overrides(overrides: list[str]) -> None:
    """No override of Hydra's folder keys: a re-run resumes or skips a run, and the sweep's plan and the analysis
    find it, at ``paths.runs_dir/<run_name>`` only. ``hydra.sweep.subdir=NAME`` put each run of a sweep into one
    folder of its record (the first trained, the others refused, none counted complete), and ``hydra.sweep.dir`` gave
    way to the sweep's own record folder without a word; ``hydra.job.config.override_dirname.kv_sep=-`` named the same
    runs anew (``L-1``), so the command without it trained them again. ``hydra.job.chdir=true`` read a relative
    paths.runs_dir from inside the run's folder, and refused the run as outside it."""
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key == "hydra.job.chdir" and value.strip().lower() in ("true", "yes", "on", "1"):  # OmegaConf's true
            raise CutlabError(f"hydra.job.chdir={value}: {CHDIR_FIX}")
        if key in HYDRA_FOLDER_KEYS or any(key == k or key.startswith(f"{k}.") for k in HYDRA_FOLDER_NAMING):
            raise CutlabError(f"{key} {FOLDER_FIX}")


CHDIR_FIX = ("a run works in the folder its command runs in, where its relative paths (paths.runs_dir=runs, "
             "data.root=...) were meant, and writes its record into its own folder itself; leave hydra.job.chdir out")
FOLDER_FIX = ("is cutlab's to set: each run's folder is paths.runs_dir/<run_name> (where a re-run resumes or skips it "
              "and the analysis reads it), each sweep's record is in paths.runs_dir/_sweeps; give paths.runs_dir=DIR, "
              "and run_name=NAME to name one run's folder")
OUTPUT_SUBDIR_FIX = ("Hydra would write its unresolved config (config.yaml, hydra.yaml, overrides.yaml) there, over a "
                     "run's resolved config.yaml with '.', outside the runs folder with a path; cutlab writes each "
                     "run's config itself, once: leave hydra.output_subdir out")
# the keys of the composed hydra node that place or name a run's folder, each with cutlab's own value beside Hydra's
COMPOSED_KEYS = ("run.dir", "sweep.dir", "sweep.subdir", "output_subdir", "job.chdir",
                 "job.config.override_dirname.kv_sep", "job.config.override_dirname.item_sep",
                 "job.config.override_dirname.exclude_keys")
HYDRA_DEFAULTS = {"job.config.override_dirname.kv_sep": "=", "job.config.override_dirname.item_sep": ","}


def check_composed_folders(hydra_node, overrides: list[str], source: str, ignored: tuple[str, ...] = ()) -> None:
    """The composed ``hydra`` node places and names run folders as conf/config.yaml does, wherever a value came from:
    the command line's check (check_folder_overrides) reads keys only, so a sweep file of the user's own (``sweep:
    subdir: ${hydra.job.num}``, ``job: chdir: true``) or a dict (``hydra.job={chdir:true}``) passed it. ``source``
    names the config files composed (e.g. "--config-name mysweep"); ``ignored`` are keys the caller sets itself."""
    from omegaconf import OmegaConf

    ours, composed = _cutlab_hydra(), OmegaConf.to_container(hydra_node, resolve=False)
    for key in COMPOSED_KEYS:
        value = _at(composed, key)
        if key not in ignored and value != _at(ours, key):
            where = _where_set(f"hydra.{key}", value, overrides, source)
            fix = {"job.chdir": CHDIR_FIX, "output_subdir": OUTPUT_SUBDIR_FIX}.get(key, f"hydra.{key} {FOLDER_FIX}")
            raise CutlabError(f"{where}: {fix}")


def _cutlab_hydra() -> dict:
    """conf/config.yaml's hydra node, unresolved, with Hydra's defaults for what it leaves to Hydra."""
    from omegaconf import OmegaConf

    ours = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "config.yaml").hydra, resolve=False)
    for key, value in HYDRA_DEFAULTS.items():
        *parents, last = key.split(".")
        node = ours
        for part in parents:
            node = node.setdefault(part, {})
        node.setdefault(last, value)
    return ours


def _at(tree, key: str):
    for part in key.split("."):
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree


def _where_set(key: str, value, overrides: list[str], source: str) -> str:
    """``key=value`` and where it was set: the override that sets it or a node above it, else ``source``."""
    value = str(value).lower() if isinstance(value, bool) else value  # as YAML and the command line spell it
    for override in overrides:
        given = override.lstrip("+~").partition("=")[0]
        if given == key or key.startswith(f"{given}.") or given.startswith(f"{key}."):
            return f"{override} on the command line" + ("" if given == key else f" sets {key}={value}")
    return f"{key}={value} set in {source}"


def check_folder_name(key: str, value, names: str, example: str) -> None:
    """``value`` of ``key`` names one folder (``names``): no path, ``.`` or ``..``, which would write elsewhere."""
    name = str(value)
    if name.strip() in (".", "..") or any(sep in name for sep in ("/", "\\", "\0")):
        raise CutlabError(f"{key}={name!r} is not a single folder name (no '/', '\\', '.' or '..'); it names "
                          f"{names}: e.g. {key}={example}")


def check_run_folder_name(run_dir: Path, cfg) -> None:
    """The run's folder lies strictly inside the runs folder (a search's trial folders lie deeper inside)."""
    check_run_name(cfg.get("run_name"))
    runs = Path(cfg.paths.runs_dir).resolve()
    folder = Path(run_dir).resolve()
    if folder == runs or runs not in folder.parents:
        raise CutlabError(f"the run folder {run_dir} is not inside paths.runs_dir={cfg.paths.runs_dir}; give each run "
                          "its own folder there (run_name=<a folder name>)")


def run_name(explicit: str | None, override_dirname: str) -> str:
    """``explicit`` if given, else the overrides (Hydra's ``job.override_dirname``) made filesystem-safe.

    Long override lists keep a readable prefix plus a hash of the whole, so names stay unique and short.
    """
    if explicit not in UNSET:
        check_run_name(explicit)
        name = str(explicit)
    elif not override_dirname:
        name = "default"
    else:
        name = override_dirname
    safe = UNSAFE.sub("_", name)
    if len(safe) > MAX_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:10]
        safe = f"{safe[: MAX_NAME - 11]}-{digest}"
    return safe
