"""What a reproduction runs on: ``--data NAME=PATH`` and ``--weights NAME=HUB_ID|PATH``, checked before anything runs.

A dataset is available when ``--data`` points at it, or when its config's default location holds it (UCSD Ped2
and IMDb ship in the shared data folder). Its layout is checked with the loader's own locating code, without
decoding anything, so a wrong folder is named now and not hours into a cluster job. A pretrained checkpoint
(ViT, DistilBERT, RoBERTa, Llama) is available only when ``--weights`` names it: a local folder, or a folder of
that name in the models folder ($CUTLAB_MODELS_DIR), must hold a Hugging Face checkpoint (config.json and weights);
a hub id must be in the local Hugging Face cache (runs are not counted on to reach the hub: a cluster's compute nodes
often cannot). Every missing input is reported with the flag that supplies it.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from cutlab.config.paths import CONFIG_DIR, MODELS_ENV, data_dir, models_dir
from cutlab.errors import CutlabError

CONF_DATA = CONFIG_DIR / "data"


@dataclass(frozen=True)
class Weights:
    model: str       # the model config that needs it
    key: str         # the override that points the model at it
    example: str     # the paper's checkpoint
    tokenizer: bool  # a local folder must hold the tokenizer too


WEIGHTS = {
    "vit": Weights("vit", "model.pretrained", "google/vit-base-patch16-224-in21k (the paper's ViT-B/16)", False),
    "distilbert": Weights("distilbert", "model.source", "distilbert-base-uncased", True),
    "roberta": Weights("roberta", "model.source", "roberta-base", True),
    "llama": Weights("causal_lm", "model.pretrained", "meta-llama/Llama-3.1-8B", True),
}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.txt", "vocab.json")
HYDRA_SPECIAL = set(",[]{}()'\"=\\")  # a path holding one of these would be read as a sweep or a list


def parse_pairs(items: list[str], flag: str, known: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` items of ``flag``, each NAME one of ``known``; one clear line for anything else."""
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not value or name not in known:
            raise CutlabError(f"{flag} {item}: expected NAME=PATH with NAME one of {', '.join(known)}; put cutlab "
                              f"overrides before {flag} or after --")
        if HYDRA_SPECIAL & set(value):
            raise CutlabError(f"{flag} {item}: the location holds one of {''.join(sorted(HYDRA_SPECIAL))}, which the "
                              "run's command line would read as a sweep or a list; link it from a plain path")
        if name in pairs and pairs[name] != value:  # the last one given would win without a word
            raise CutlabError(f"{flag} {name}= is given twice ({pairs[name]} and {value}); give each NAME once")
        pairs[name] = value
    return pairs


def dataset_names() -> list[str]:
    return sorted(path.stem for path in CONF_DATA.glob("*.yaml"))


@dataclass
class Inputs:
    data: dict[str, str] = field(default_factory=dict)
    weights: dict[str, str] = field(default_factory=dict)
    data_dir: Path = field(default_factory=data_dir)
    models_dir: Path = field(default_factory=models_dir)
    hub_cache: Path | None = None  # the Hugging Face cache folder; None: huggingface_hub's own (HF_HUB_CACHE, HF_HOME)

    def for_data(self, name: str, keys: dict | None = None) -> tuple[list[str], str | None]:
        """(overrides pointing the runs at the dataset, None) or ([], why it is skipped, with the flag). ``keys``: the
        grid's own data.* values (its sweep's), over the data config's."""
        if name == "synthetic":  # generated, no files
            return [], None
        config = {**yaml.safe_load((CONF_DATA / f"{name}.yaml").read_text()), **(keys or {})}
        given = self.data.get(name)
        root = given if given is not None else _default_root(config.get("root"), self.data_dir)
        if root is None:
            return [], f"{name} is not given: pass --data {name}=PATH ({describe(name)})"
        if not str(root).startswith("hf:"):
            root = str(Path(root).expanduser().resolve())
        problem = check_dataset(name, root, config)
        if problem:
            flag = f"--data {name}={given}" if given is not None else f"its default {root} (or pass --data {name}=PATH)"
            return [], f"{flag}: {problem}"
        return ([f"data.root={root}"] if given is not None else []), None

    def for_model(self, model: str) -> tuple[list[str], str | None]:
        """(overrides pointing the model at its checkpoint, None), ([], None) for a model that needs none, or the reason."""
        flag = next((name for name, weights in WEIGHTS.items() if weights.model == model), None)
        if flag is None:
            return [], None
        spec, value = WEIGHTS[flag], self.weights.get(flag)
        if value is None:
            return [], f"model={model} needs its pretrained checkpoint: pass --weights {flag}=HUB_ID|PATH, e.g. {spec.example}"
        local = Path(value).expanduser()
        if not (local.exists() or value.startswith(("/", ".", "~"))) and (self.models_dir / value).is_dir():
            local = self.models_dir / value  # a checkpoint kept in the models folder, named by its folder's name
        if local.exists() or value.startswith(("/", ".", "~")):
            folder = local.resolve()
            problem = check_checkpoint(folder, spec.tokenizer)
            if problem:
                return [], f"--weights {flag}={value}: {problem}"
            value = str(folder)
        elif not in_hub_cache(value, self.hub_cache):
            return [], (f"--weights {flag}={value}: looked for a folder {local.resolve()}, a folder "
                        f"{self.models_dir / value} (the models folder, ${MODELS_ENV}) and the hub id {value} in the "
                        f"Hugging Face cache {self.hub_cache or hub_cache_default()}, and none is there; the runs "
                        f"do not download it: put the checkpoint in the models folder (e.g. `hf download {value} "
                        f"--local-dir {self.models_dir / value.split('/')[-1]}` where the hub is reachable) and pass "
                        f"--weights {flag}={value.split('/')[-1]}")
        return [f"{spec.key}={value}"], None


def hub_cache_default() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def in_hub_cache(repo_id: str, cache: Path | None) -> bool:
    """Whether the Hugging Face cache holds ``repo_id``'s config.json (what loading it offline reads first)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json", cache_dir=cache), str)
    except ValueError:  # not a valid repo id (huggingface_hub's HFValidationError)
        return False


def describe(name: str) -> str:
    """The dataset and its layout: the first sentence of its config's opening comment (conf/data/<name>.yaml), which
    may run over several lines; a sentence ends at '.' or ';' before a word (not "et al. 2023", not "... and")."""
    lines = (CONF_DATA / f"{name}.yaml").read_text().splitlines()
    comment = " ".join(line.lstrip("# ") for line in itertools.takewhile(lambda line: line.startswith("#"), lines))
    return re.split(r"(?<!\.)[.;]\s+(?=[A-Za-z])", comment, maxsplit=1)[0].rstrip(".;, ")


def _default_root(root, data_dir: Path) -> str | None:
    if root is None:
        return None
    return str(root).replace("${paths.data_dir}", str(data_dir))


def check_checkpoint(folder: Path, tokenizer: bool) -> str | None:
    if not folder.is_dir():
        return f"{folder} is not a folder (a Hugging Face checkpoint folder or a hub id)"
    names = {path.name for path in folder.iterdir()}
    needed = [("config.json", ("config.json",)), ("weights", WEIGHT_FILES)] + ([("a tokenizer", TOKENIZER_FILES)] if tokenizer else [])
    missing = [what for what, files in needed if not names & set(files)]
    if missing:
        return (f"{folder} is not a Hugging Face checkpoint: it lacks {', '.join(missing)} "
                f"(expected config.json, one of {', '.join(WEIGHT_FILES)}{' and tokenizer files' if tokenizer else ''})")
    return None


def check_dataset(name: str, root: str, config: dict) -> str | None:
    """Why ``root`` does not hold dataset ``name`` in a layout its loader reads, or None (nothing is decoded)."""
    try:
        CHECKS.get(name, _exists)(root, config)
    except CutlabError as error:
        return str(error)
    return None


def _exists(root: str, config: dict) -> None:
    if not Path(root).exists():
        raise CutlabError(f"{root} does not exist")


def _ucsd(variant: str):
    def check(root: str, config: dict) -> None:
        from cutlab.core.data.ucsd import _hint, _locate, check_npz_layout, scan_official

        kind, path = _locate(variant, root)
        if kind == "official":
            scan_official(path, _hint(variant))
        else:  # a file of another kind passed, and every run of its grids then stopped on it
            check_npz_layout(path, _hint(variant))
    return check


def _avenue(root: str, config: dict) -> None:
    from cutlab.core.data import avenue
    from cutlab.core.data.clipfiles import existing_folder, video_files

    folder = avenue._locate(existing_folder(root, "avenue", avenue.HINT))
    for split, _ in avenue._SPLITS:
        if not video_files(folder / split):
            raise CutlabError(f"{folder / split} holds no video files; {avenue.HINT}")


def _shanghaitech(root: str, config: dict) -> None:
    from cutlab.core.data import shanghaitech
    from cutlab.core.data.clipfiles import existing_folder, video_files

    folder = shanghaitech._locate(existing_folder(root, "shanghaitech", shanghaitech.HINT))
    if not video_files(folder / shanghaitech._TRAIN):
        raise CutlabError(f"{folder / shanghaitech._TRAIN} holds no video files; {shanghaitech.HINT}")
    if not any(path.is_dir() for path in (folder / shanghaitech._TEST).iterdir()):
        raise CutlabError(f"{folder / shanghaitech._TEST} holds no test clip folders; {shanghaitech.HINT}")


def _text_files(root: str, config: dict) -> None:
    """IMDb and MNLI: hf:<id>, the official aclImdb/ layout (IMDb), or the train and test files the config names."""
    from cutlab.core.data.text_readers import _acl_imdb_folder

    if root.startswith("hf:"):
        return
    folder = Path(root)
    if config["name"] == "imdb" and folder.is_dir() and _acl_imdb_folder(folder) is not None:
        return
    missing = [config[key] for key in ("train_file", "test_file") if not (folder / config[key]).is_file()]
    if missing:
        raise CutlabError(f"{folder} lacks {' and '.join(missing)} (data.train_file / data.test_file; the layouts "
                          f"the {config['name']} loader reads are in conf/data/{config['name']}.yaml)")


def _alpaca(root: str, config: dict) -> None:
    if not Path(root).is_file():
        raise CutlabError(f"{root} is not a file: give Stanford Alpaca's alpaca_data.json (or a JSON-lines file of "
                          "{instruction, input, output})")
    from cutlab.core.data.alpaca import load_examples

    load_examples(root)  # every row, as its runs read them


CHECKS = {"ucsd_ped1": _ucsd("ped1"), "ucsd_ped2": _ucsd("ped2"), "avenue": _avenue, "shanghaitech": _shanghaitech,
          "imdb": _text_files, "mnli": _text_files, "alpaca": _alpaca}


