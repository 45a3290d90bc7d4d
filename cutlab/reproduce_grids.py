"""The grids of each ``cutlab-reproduce`` scale: which ``sweeps/*.yaml`` make it up, and the commands that run them.

The values of every grid live in its sweep file only (``hydra.sweeper.params``); this module decides which sweep
files form a scale and splits each sweep into ``python -m cutlab -m --config-name SWEEP ...`` commands, one per
dataset and model (so that a dataset's or a checkpoint's location goes to its own runs only, and a missing one
skips only its own runs). The split never changes a run's id: command-line overrides replace the swept values of
the same key, and a folder is named by the sorted overrides of its run, wherever they came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import yaml

from cutlab.config.paths import SEARCH_DIR, SWEEPS_DIR
from cutlab.errors import CutlabError

# L must equal a pretrained encoder's depth (cutlab/core/models/text_encoder.py). DistilBERT has 6 blocks although
# the paper's Table 2 lists L = 12; RoBERTa-base has 12.
ENCODER_DEPTH = {"distilbert": 6, "roberta": 12}


@dataclass(frozen=True)
class Entry:
    """One table or figure of the paper and the sweep file that holds its grid."""

    label: str
    sweep: str
    fair_comparison: bool = False  # n runs per arm (seeds), the best of each by validation (App. B)


SCALES: dict[str, tuple[Entry, ...]] = {
    # minutes on a laptop: the whole pipeline on generated video and 100 IMDb reviews, for CI
    "smoke": (Entry("Table 3 (smoke)", "reproduce_smoke_video"), Entry("Table 4 (smoke)", "reproduce_smoke_text")),
    # ~2 h on 2 CPU cores (README): Table 3's UCSD Ped2 column and one Table 4 cell with MiniLM
    "cpu": (Entry("Table 3 (cpu)", "reproduce_cpu_video"), Entry("Table 4 (cpu)", "reproduce_cpu_text")),
    # every cell and figure of the paper, for a GPU cluster
    "paper": (
        Entry("Table 3: DUST, UT (Figs 2, 7, 8, 13)", "table3"),
        Entry("Table 3: ViT", "table3_vit"),
        Entry("Table 4: UT (Figs 4, 9, 10)", "table4_ut", fair_comparison=True),
        Entry("Table 4: DistilBERT, RoBERTa (Fig 12: its constrained RoBERTa-IMDb runs)", "table4_pretrained",
              fair_comparison=True),
        Entry("Figs 5, 14: alpha ablation", "ablation_alpha"),
        Entry("Figs 5, 15: dual lr ablation", "ablation_dual_lr"),
        Entry("Fig 3: depth study", "depth"),
        Entry("Fig 6: constrained LLM SFT", "fig6_llm"),
    ),
}

UT_AT_ZERO = ("constrained UT at gamma_train 0", "train=constrained refuses it (Phi_0 is UT's input, so l_0 = 0 and the "
              "ratio form has nothing to descend from); every scale runs that cell with train=constrained_paper")


@dataclass(frozen=True)
class Grid:
    """One multirun: a sweep file restricted to one dataset and model by command-line overrides."""

    entry: Entry
    data: str
    model: str
    overrides: tuple[str, ...]
    runs: int

    def argv(self) -> list[str]:
        """``python -m cutlab`` arguments (without the locations of its inputs or the user's overrides)."""
        return ["-m", "--config-name", self.entry.sweep, *self.overrides]


def sweep_params(name: str) -> tuple[dict[str, list[str]], dict]:
    """A sweep file's swept values, as the strings Hydra names folders with, and its whole YAML."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    path = SWEEPS_DIR / f"{name}.yaml"
    try:
        config = yaml.safe_load(path.read_text())
        params = config["hydra"]["sweeper"]["params"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as error:
        raise CutlabError(f"{path} is not a sweep file with hydra.sweeper.params ({error}); restore it from git") from None
    parser = OverridesParser.create()
    values = {}
    for key, value in params.items():
        override = parser.parse_overrides([f"{key}={value}"])[0]
        values[key] = (list(override.sweep_string_iterator()) if override.is_sweep_override()
                       else [override.get_value_element_as_str()])
    return values, config


def fair_comparison_trials() -> int:
    """The paper's runs per arm and setting (App. B: five), as searches/fair_comparison.yaml gives it."""
    return int(yaml.safe_load((SEARCH_DIR / "fair_comparison.yaml").read_text())["n_trials"])


def grids(entry: Entry) -> list[Grid]:
    """The entry's sweep, split into one multirun per dataset x model (and per arm where a cell needs its own)."""
    params, config = sweep_params(entry.sweep)
    missing = [key for key in ("data", "model") if key not in params]
    if missing:
        raise CutlabError(f"sweeps/{entry.sweep}.yaml must sweep {' and '.join(missing)} for cutlab-reproduce "
                          "(hydra.sweeper.params); add it there")
    result = []
    for data in params["data"]:
        for model in params["model"]:
            base = [f"data={data}", f"model={model}"]
            if model in ENCODER_DEPTH and "L" not in params and "L" not in config:
                base.append(f"L={ENCODER_DEPTH[model]}")
            if entry.fair_comparison and "seed" not in params:
                base.append("seed=" + ",".join(str(seed) for seed in range(fair_comparison_trials())))
            for arm in _arms(model, params):
                overrides = (*base, *arm)
                result.append(Grid(entry, data, model, overrides, _count(params, overrides)))
    return result


def _arms(model: str, params: dict[str, list[str]]) -> list[list[str]]:
    """Constrained UT at gamma_train 0 runs with train=constrained_paper (UT_AT_ZERO); every other cell as swept."""
    trains, gammas = params.get("train", []), params.get("gamma", [])
    zero = [g for g in gammas if _is_zero(g)]
    if model != "ut" or "constrained" not in trains or not zero:
        return [[]]
    arms = []
    others = [t for t in trains if t != "constrained"]
    noisy = [g for g in gammas if not _is_zero(g)]
    if others:
        arms.append([f"train={','.join(others)}"])
    if noisy:
        arms.append(["train=constrained", f"gamma={','.join(noisy)}"])
    arms.append(["train=constrained_paper", f"gamma={','.join(zero)}"])
    return arms


def _is_zero(value: str) -> bool:
    try:
        return float(value) == 0
    except ValueError:
        return False


def _count(params: dict[str, list[str]], overrides: tuple[str, ...]) -> int:
    merged = dict(params)
    for override in overrides:
        key, _, value = override.partition("=")
        merged[key] = value.split(",")
    return math.prod(len(values) for values in merged.values())
