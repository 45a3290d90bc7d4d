"""The one list of config keys that do not change a run's result, and what reads it.

Hydra leaves these keys out of a run's folder name (conf/config.yaml reads the list through the
``cutlab_folder_neutral_keys`` resolver), and a folder's stored config is compared without them before a run is
skipped or resumed (cutlab.run.identity), so that running the same command with another launcher, device or
W&B mode finds the same run. (A key that changes nothing only while another holds a given value, e.g. the check
cadence of a run that evaluates its last iterate, is cutlab.run.identity.INERT_KEYS.)
"""

from __future__ import annotations

from cutlab.config.launcher import folder_neutral_keys

# Keys that choose how a run executes, not what it computes: how it is launched, logged, threaded, checkpointed, and
# where its files are (what ``paths`` changes, the data and model files, is compared through the keys resolved from
# it). Threads and device can move the last digits, as the processor does (float summation order); a resumed
# session's are recorded in provenance.json instead (cutlab.run.experiment).
RESULT_NEUTRAL_KEYS = (
    "run_name", *folder_neutral_keys(), "device", "threads", "progress", "wandb.mode", "wandb.project",
    "wandb.entity", "wandb.group", "wandb.tags", "paths.runs_dir", "paths.cache_dir", "paths.data_dir", "paths.models_dir", "checkpoint.every_steps",
)
# Left out of folder names as well, yet compared before a folder is reused: the evaluation noise is drawn batch by
# batch, so another evaluation batch size draws other noise; it gets the same folder and is refused, naming the key.
FOLDER_NEUTRAL_KEYS = (*RESULT_NEUTRAL_KEYS, "eval.batch_size")
# Sections whose every key is result-neutral: dropped whole from a stored config before it is compared
RESULT_NEUTRAL_SECTIONS = ("paths", "wandb", "launcher", "checkpoint")


def without_result_neutral_keys(config: dict) -> dict:
    """``config`` (a resolved run config) without the keys that do not change its result."""
    top = {key for key in RESULT_NEUTRAL_KEYS if "." not in key} | set(RESULT_NEUTRAL_SECTIONS)
    return {key: value for key, value in config.items() if key not in top}


def is_result_neutral_override(override: str) -> bool:
    """Whether a ``key=value`` override only sets a key that does not change a run's result (threads, W&B, paths)."""
    key = override.split("=", 1)[0].lstrip("+~")
    return key in RESULT_NEUTRAL_KEYS or key.split(".", 1)[0] in RESULT_NEUTRAL_SECTIONS
