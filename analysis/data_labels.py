"""Which data a run was trained on, as the tables name it: the data set and the settings that set it apart."""

from __future__ import annotations

import pandas as pd

from cutlab.config.data_settings import apart_from_default, named_with, settings_apart
from cutlab.config.groups import shipped_data, shipped_root_apart

DATA_PREFIX = "cfg.data."  # a run's data config, one column per key


def label_data_settings(frame: pd.DataFrame) -> pd.DataFrame:
    """Runs of one data set trained on other data settings (another ``data.root``, stride, image size, subset, ...)
    are other cells, never seeds or trials of one: ``dataset = "name (key=value, ...)"`` names each setting that
    differs from the data set's shipped config (cutlab-eval's rule, data_settings.apart_from_default), whatever else
    the folder holds, and a root where the runs' roots differ or one is not the shipped one (one's own npz as
    data=ucsd_ped2 is not the paper's Ped2). ``dataset_any_root``: the label without the root; ``data_defaults``:
    every setting but the root is the shipped one, the only data the paper's numbers stand beside."""
    columns = [column for column in frame.columns if column.startswith(DATA_PREFIX)]
    frame["dataset_any_root"] = frame["dataset"]
    frame["data_defaults"] = False
    for name, group in frame.groupby("dataset", dropna=True):
        data_dirs = group.get("cfg.paths.data_dir", pd.Series(None, index=group.index))
        configs = data_configs(group, columns)
        for index, config, among in zip(group.index, configs, settings_apart(configs)):
            roots = [part for part in among if _key(part) == "root"] \
                or shipped_root_apart(name, config, data_dirs[index])  # a root shared by all runs, if not shipped
            settings = _settings_apart_from_shipped(name, config, data_dirs[index], among)
            frame.at[index, "data_defaults"] = settings == []
            settings = settings if settings is not None else [part for part in among if _key(part) != "root"]
            frame.at[index, "dataset"] = named_with(name, roots + settings)
            frame.at[index, "dataset_any_root"] = named_with(name, settings)
    return frame


def _settings_apart_from_shipped(name: str, config: dict, data_dir, among: list[str]) -> list[str] | None:
    """``key=value`` for each setting of ``config`` but the root that differs from data set ``name``'s shipped config,
    shown as ``among`` (what tells the runs apart) shows it where it does: two paths of one file name stay two; None
    where the shipped config is unknown (a data config of the user's own)."""
    # a record without paths.data_dir cannot compose the shipped root, but every other shipped setting
    shipped = shipped_data(name, data_dir) or shipped_data(name, "")
    if shipped is None:
        return None
    ours = {key: value for key, value in config.items() if key != "root"}
    parts = apart_from_default(ours, {key: value for key, value in shipped.items() if key != "root"}, short=True)
    shown = {_key(part): part for part in among}
    return [shown.get(_key(part), part) for part in parts]


def _key(part: str) -> str:
    return part.partition("=")[0]  # stride of stride=100


def data_configs(runs: pd.DataFrame, columns: list[str] | None = None) -> list[dict]:
    """Each run's ``data.*`` config from its ``cfg.data.*`` columns (a key its record lacks is NaN there)."""
    columns = columns if columns is not None else [c for c in runs.columns if c.startswith(DATA_PREFIX)]
    return [{column[len(DATA_PREFIX):]: row[column] for column in columns} for _, row in runs.iterrows()]
