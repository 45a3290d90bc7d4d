"""The paper's published Tables 3 and 4, shipped as package data (see published/SOURCE.md).

``published_value`` finds the paper's number for one of our cells. Our dataset names map onto the
paper's (``ucsd_ped2`` -> ``ucsd``), and so do model names where ours tell apart what the paper's
table does not (``ut_text``, the UT on text, is the paper's Table 4 ``ut``). Pretrained models have the
depth of their checkpoint, which the paper sometimes misreports (DistilBERT "L = 12"): when the paper
lists exactly one depth for such a model and dataset, that row is matched whatever our L, and the
match is marked as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import pandas as pd

TABLE3 = "table3_video_mean_rmse.csv"
TABLE4 = "table4_text_accuracy_auc.csv"
#: our dataset name -> the paper's
PAPER_DATASET = {"ucsd_ped2": "ucsd", "avenue": "avenue", "shanghaitech": "shanghaitech", "imdb": "imdb",
                 "mnli": "mnli"}
#: our model name -> the paper's, where they differ: Table 4 calls the text UT (paper Sec. 5) plain "UT"
PAPER_MODEL = {"ut_text": "ut"}
#: models whose depth comes from a pretrained checkpoint, not from the grid
PRETRAINED = {"vit", "distilbert", "roberta"}


@dataclass(frozen=True)
class PublishedValue:
    value: float
    paper_L: int
    #: True when matched on model and dataset only, because the paper's depth differs from ours
    depth_mismatch: bool


@lru_cache(maxsize=None)
def load_published(name: str) -> pd.DataFrame:
    """One of the shipped CSVs: model, dataset, L, gamma_train, constrained, <value column>."""
    with resources.files(__package__).joinpath("published", name).open() as handle:
        frame = pd.read_csv(handle)
    frame["constrained"] = frame["constrained"].astype(str).str.lower().eq("true")
    return frame


def published_value(name: str, model: str, dataset: str | None, L: int, gamma_train: float, constrained: bool
                    ) -> PublishedValue | None:
    """The paper's number for this cell and arm, or None where the paper has no such cell. ``dataset``: the data set's
    name, None where a run's data settings are not the shipped ones (tables._paper_data): the paper has no cell for
    a reduced test set, whatever it is called."""
    paper_dataset = PAPER_DATASET.get(dataset)
    if paper_dataset is None:
        return None
    table = load_published(name)
    value_column = table.columns[-1]
    model = PAPER_MODEL.get(model, model)
    rows = table[(table["model"] == model) & (table["dataset"] == paper_dataset)
                 & ((table["gamma_train"] - gamma_train).abs() < 1e-6) & (table["constrained"] == bool(constrained))]
    exact = rows[rows["L"] == L]
    if len(exact):
        return PublishedValue(float(exact[value_column].iloc[0]), int(L), False)
    if model in PRETRAINED and rows["L"].nunique() == 1:
        return PublishedValue(float(rows[value_column].iloc[0]), int(rows["L"].iloc[0]), True)
    return None
