"""Which run a folder holds: its stored resolved config, compared key by key with the one asked for.

A folder is named by the command line (lossily: every unusual character becomes ``_``) and some keys are left
out of the name, so the name alone cannot say that a folder holds *this* run. The stored ``config.yaml`` can:
the decision to skip or resume a folder is taken only after it matches, and a folder holding another
configuration is refused, naming what differs, rather than handing back someone else's results.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from cutlab.config.neutral import without_result_neutral_keys
from cutlab.config.paths import with_absolute_root
from cutlab.core.data.cache import data_files
from cutlab.core.precision import PRECISION_BEFORE_KEY
from cutlab.errors import CutlabError
from cutlab.run.records import CHECKPOINT, CONFIG, MODEL_SOURCE, PROVENANCE, SUMMARY, read_mapping
from cutlab.tasks.models import model_source

MOVE_ASIDE = "pass run_name=<new name> to start a separate run (the existing one is kept)"


# Keys added to the config after runs were first recorded, each with the value that gives what a config written
# before it computed: a stored config without the key is compared as if it held that value, so its folder is still
# skipped or resumed rather than refused.
ADDED_KEYS = {"eval.iterate": "last", "precision": PRECISION_BEFORE_KEY,
              "model.lipschitz_estimate": "power_iteration"}  # DUST's; filled on both sides, so other models are alike
# Keys that change nothing while another key holds a given value: left out of the comparison then
# (with the last iterate evaluated, no checks run, so their cadence is moot).
INERT_KEYS = {"eval.check_every_steps": ("eval.iterate", "last")}


def comparable(config: dict) -> dict:
    """The config as compared: without the keys that may differ between a run and its resumption
    (cutlab.config.neutral), with ADDED_KEYS filled in where absent and INERT_KEYS left out where inert."""
    config = {key: _normalised(value) for key, value in without_result_neutral_keys(config).items()}
    for key, then in ADDED_KEYS.items():
        if _lookup(config, key) is _ABSENT:
            config = _with(config, key, then)
    for key, (switch, value) in INERT_KEYS.items():
        if _lookup(config, switch) == value:
            config = _with(config, key, _ABSENT)
    return config


def configuration_key(config: dict) -> str:
    """One string per configuration, as ``comparable`` compares them, with whole numbers as floats: gamma=0 and
    gamma=0.0 compose 0 and 0.0, two folder names for one run (so a sweep can refuse to train it twice)."""
    return json.dumps(_floats(comparable(config)), sort_keys=True, default=str)


def _floats(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_floats(item) for item in value]
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


_ABSENT = object()


def _lookup(config: dict, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def _with(config: dict, dotted: str, value: Any) -> dict:
    """A copy of ``config`` with ``dotted`` set to ``value`` (removed for _ABSENT); a missing parent section is
    left alone, since a config without the section cannot hold the key."""
    head, _, rest = dotted.partition(".")
    if not rest:
        return {k: v for k, v in config.items() if k != head} if value is _ABSENT else {**config, head: value}
    section = config.get(head)
    if not isinstance(section, dict):
        return config
    return {**config, head: _with(section, rest, value)}


def _normalised(value: Any) -> Any:
    """Paths spelled differently but naming the same file compare equal (``/a/main/../shared`` = ``/a/shared``)."""
    if isinstance(value, dict):
        return {key: _normalised(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalised(item) for item in value]
    if isinstance(value, str) and value.startswith("/"):
        return os.path.normpath(value)
    return value


def differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return out


def stored_config(run_dir: Path, fix: str | None = None) -> dict | None:
    """The folder's ``config.yaml`` (None when there is none); a file that is not a config (not YAML, or YAML that is
    not a mapping: an empty file, a list) stops in one line. ``fix``: what to do instead (cutlab-eval reads it too)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return read_mapping(run_dir / CONFIG, lambda text: yaml.load(text, Loader=loader), (yaml.YAMLError,), "run config",
                        fix)


def check_same_run(run_dir: Path, resolved: dict) -> None:
    """Refuse ``run_dir`` unless it holds no record yet or its stored config computes the same result as ``resolved``.

    Checked before a complete run is skipped, so that another configuration mapping to the same folder name never
    gets this folder's results. A summary or checkpoint without a config beside it is not cutlab's: refused too.
    """
    stored = stored_config(run_dir)
    if stored is None:
        if (run_dir / SUMMARY).exists() or (run_dir / CHECKPOINT).exists():
            raise CutlabError(f"{run_dir} holds a run record but no {CONFIG}, so it cannot be told apart from another "
                              f"run; {MOVE_ASIDE}")
        return
    # a relative root (recorded before roots were made absolute, or a sweep's job before its run makes it so) is
    # read as the run reads it, from the working folder
    found = differences(comparable(with_absolute_root(stored)), comparable(with_absolute_root(resolved)))
    if found:
        raise CutlabError(f"{run_dir} already holds a run with another configuration ({'; '.join(found[:5])}"
                          f"{'; ...' if len(found) > 5 else ''}); {MOVE_ASIDE}")


def data_fingerprint(resolved: dict) -> dict | None:
    """The run's data as it is now (cutlab.core.data.cache.data_files of its data.root), recorded when it starts."""
    return data_files((resolved.get("data") or {}).get("root"))


def check_same_data(run_dir: Path, resolved: dict) -> None:
    """Refuse to resume ``run_dir`` on data whose files changed since it started (a clip replaced, added or removed
    moves the train/validation/test split): the resumed run would finish on other data than it began on, and say
    nothing. Runs recorded before the fingerprint was (no ``data_files`` in provenance.json) are not checked."""
    record = read_mapping(run_dir / PROVENANCE, json.loads, (json.JSONDecodeError,), "run provenance") or {}
    then, now = record.get("data_files"), data_fingerprint(resolved)
    if not isinstance(then, dict) or now is None or then == now:
        return
    root = resolved["data"]["root"]
    raise CutlabError(f"data.root={root} changed since {run_dir} began ({then.get('files')} files then, {now['files']} "
                      "now, or other sizes or modification times), so resuming would finish it on other data: restore "
                      f"the files as they were (a copy keeps their times with cp -p or rsync -a), or {MOVE_ASIDE}")


def check_same_model_source(run_dir: Path, target: str) -> None:
    """Refuse to resume ``run_dir`` with a model module of the user's own that changed since the run began: it would
    finish with other code than it began with, and say nothing (cutlab-eval refuses the same: model_source_change)."""
    changed = model_source_change(run_dir, target, "began")
    if changed:
        raise CutlabError(f"{changed}, so resuming would finish the run with other code: restore that file as it was "
                          f"(its sha256 is in the run's {PROVENANCE}), or {MOVE_ASIDE}")


def model_source_change(run_dir: Path, target: str, since: str, fix: str | None = None) -> str | None:
    """How the module defining ``target``, a model of the user's own, changed since the run ``since`` (began, was
    trained), as its provenance.json's MODEL_SOURCE has it; None where it did not, for cutlab's own models (their
    code is the record's source_digest) and for runs recorded before the key. ``fix``: what reading the record
    should advise where it cannot be read."""
    record = read_mapping(run_dir / PROVENANCE, json.loads, (json.JSONDecodeError,), "run provenance", fix=fix) or {}
    then = record.get(MODEL_SOURCE)
    if not isinstance(then, dict) or not isinstance(then.get("sha256"), str):
        return None
    now = model_source(target)
    if now is not None and now["sha256"] == then["sha256"]:
        return None
    where = now["file"] if now else then.get("file")
    return (f"model._target_={target} is defined in {where}, which has changed since the run {since} (sha256 "
            f"{then['sha256'][:12]} then, {now['sha256'][:12] if now else 'none'} now)")
