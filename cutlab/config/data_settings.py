"""What tells data configs of one data set apart: the ``name (key=value, ...)`` of the analysis's cells (runs trained
on another ``data.root``, image size, subset) and of cutlab-eval's evaluations (data evaluated from another root).

Plain Python on plain values, so that the analysis (run records as a table) and cutlab-eval (a request's dict) name
the same data the same way.
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any

FIXED = ("name", "task")  # one data set has one name and one family: never what tells its configs apart
#: the data keys that decide which sample falls in which split: changing one moves clips or reviews between training,
#: validation and test. Every other key cuts the same samples otherwise (frames, stride, tokens, image size) or takes
#: fewer of one split (train_subset, test_subset).
SPLIT_KEYS = ("val_clips", "test_clips", "training_clips", "val_size", "subset_seed", "train_file", "test_file",
              "subset", "val_fraction", "test_fraction", "split_seed")


def settings_apart(configs: list[dict], short: bool = True, null_is_set: bool = False) -> list[list[str]]:
    """Per config (the ``data.*`` keys of one data set), ``key=value`` for each key whose values differ among
    ``configs``, in the order the keys first appear. A key a config lacks (None or NaN: written before the key
    existed) is no difference and is not shown for it. ``short``: a path is shown by its last part where no two of
    the values share it (a table's column stays narrow); else every value as written. ``null_is_set``: configs
    composed whole (cutlab-eval's request and its data's default), where only a missing key is lacking and null is
    a setting (``test_subset: null``: every review), shown ``key=null``."""
    configs = _roots_matched(configs)
    keys = list(dict.fromkeys(key for config in configs for key in config if key not in FIXED))

    def lacks(config: dict, key: str) -> bool:
        return key not in config if null_is_set and config.get(key) is None else _absent(config.get(key))

    present = {key: [config[key] for config in configs if not lacks(config, key)] for key in keys}
    differing = [key for key in keys if len({_comparable(value) for value in present[key]}) > 1]
    shown = {key: _shown(present[key], short) for key in differing}
    return [[f"{key}={shown[key][_comparable(config[key])]}" for key in differing if not lacks(config, key)]
            for config in configs]


def apart_from_default(data: dict, default: dict, short: bool = False) -> list[str]:
    """``key=value`` for each setting of ``data`` (one data config) that differs from ``default``, its data set's config
    as shipped: there a null is a setting (video_folder's ``root: null``), and a key ``data`` lacks (a record from
    before the key existed) is no difference. The one rule by which cutlab-eval names the data it evaluated and the
    analysis the data a run trained on (another ``data.root`` than the shipped one is other data)."""
    return settings_apart([data, default], short=short, null_is_set=True)[0]


def _roots_matched(configs: list[dict]) -> list[dict]:
    """A relative ``root`` (recorded before cutlab made roots absolute, from the folder the run was started in) read as
    the one absolute root among ``configs`` that ends with it, so that old and new records of one sweep stay one cell;
    left as written where none, or several, do."""
    absolute = {c["root"] for c in configs if isinstance(c.get("root"), str) and c["root"].startswith("/")}
    matched = []
    for config in configs:
        root = config.get("root")
        if isinstance(root, str) and root and not root.startswith(("/", "hf:")):
            ends = [a for a in absolute if a.endswith("/" + root.removeprefix("./"))]
            config = {**config, "root": ends[0]} if len(ends) == 1 else config
        matched.append(config)
    return matched


def named_with(name: str, parts: list[str]) -> str:
    """``name (part, part)``, or ``name`` alone when nothing tells it apart."""
    return f"{name} ({', '.join(parts)})" if parts else name


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, numbers.Real) and value != value)  # NaN: a table's empty cell


def _comparable(value: Any) -> Any:
    """Numbers by value (a JSON record's 10 and a table column's 10.0 are one setting), anything else as written."""
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else repr(value)


def _shown(values: list, short: bool) -> dict[Any, str]:
    first: dict[Any, Any] = {}
    for value in values:
        first.setdefault(_comparable(value), value)  # the first of equal values is the one shown
    full = {key: "null" if value is None else str(value) for key, value in first.items()}  # as the YAML says it
    if not short:
        return full
    names = {key: Path(value).name if isinstance(value, str) and "/" in value else full[key]
             for key, value in first.items()}
    return names if len(set(names.values())) == len(names) else full
