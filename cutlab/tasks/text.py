"""Builds the text classification task from config: examples, tokenizer, model, sigma_x and objective.

``model._target_`` builds the model: a Hugging Face encoder (``hf_encoder``, ``distilbert``, ``roberta``: every
hidden state's first token through one shared readout) or ``ut_text`` (a pretrained encoder's word embeddings
under UT layers); any text model offers ``input_embeddings()`` and ``pad_token_id``. ``data.name`` picks the
reader (imdb, mnli). ``transformers`` is imported only by text and instruction runs.
"""

from __future__ import annotations

import time
from functools import partial

from omegaconf import DictConfig, OmegaConf

from cutlab.core.data.text import classification_batch, shuffled, split_sizes, token_embedding_std
from cutlab.core.data.token_cache import cached_tokenize
from cutlab.core.data.text_readers import read_imdb, read_mnli
from cutlab.core.models.hf_loading import load_tokenizer, resolve_source
from cutlab.core.objectives.classification import ClassificationObjective
from cutlab.config.text_data import check_text_data
from cutlab.errors import CutlabError
from cutlab.tasks import Task, say
from cutlab.tasks.models import model_for
from cutlab.tasks.vocabulary import check_same_vocabulary

READERS = {"imdb": read_imdb, "mnli": read_mnli}


def read_splits(cfg: DictConfig):
    """(train, validation, test) example lists: validation is carved from the shuffled training pool."""
    data = cfg.data
    if data.name not in READERS:
        raise CutlabError(f"data.name={data.name} has no text reader; text data are {', '.join(READERS)}, and a data "
                          "config of your own keeps the name of the reader that reads it (name: imdb for JSON lines "
                          "of text and label)")
    reader = READERS[data.name]
    if data.name == "imdb":  # its JSON lines may hold more classes than sentiment's two; MNLI has its three
        reader = partial(read_imdb, num_labels=data.num_labels)
    pool = shuffled(reader(data.root, "train", data.train_file), data.subset_seed)
    test = shuffled(reader(data.root, "test", data.test_file), data.subset_seed)
    if len(pool) < 2:
        raise CutlabError(f"{data.name} training split has {len(pool)} labelled rows; need at least 2 (train + validation)")
    val_count, train_count = split_sizes(len(pool), data.val_size, data.train_subset)
    test_count = len(test) if data.test_subset is None else min(int(data.test_subset), len(test))
    return pool[val_count : val_count + train_count], pool[:val_count], test[:test_count]


def check_tokenizer_fits(tokenizer, embedding_rows: int, pad_id: int | None, cfg: DictConfig) -> None:
    """Stop a tokenizer whose ids do not index the model's embedding table as intended (e.g. RoBERTa's with DistilBERT)."""
    model_cfg = cfg.model
    name = model_cfg.tokenizer or model_cfg.source
    if len(tokenizer) > embedding_rows:
        raise CutlabError(
            f"tokenizer {name} has {len(tokenizer)} tokens but the model {model_cfg.source} embeds only {embedding_rows}: "
            "they do not belong together; set model.tokenizer to the model's own tokenizer (or null for the model's folder)"
        )
    if pad_id is not None and tokenizer.pad_token_id != pad_id:
        raise CutlabError(
            f"tokenizer {name} pads with id {tokenizer.pad_token_id} but the model {model_cfg.source} expects pad id "
            f"{pad_id}: they do not belong together; set model.tokenizer to the model's own tokenizer"
        )


def build_text_task(cfg: DictConfig) -> Task:
    model_cfg, data = cfg.model, cfg.data
    check_text_data(data)
    tokenizer = load_tokenizer(model_cfg.tokenizer or model_cfg.source,
                               "model.tokenizer" if model_cfg.tokenizer else "model.source")
    started = time.perf_counter()
    model = model_for(cfg, num_labels=data.num_labels)
    table = model.input_embeddings().weight
    check_tokenizer_fits(tokenizer, table.shape[0], model.pad_token_id, cfg)
    limit = getattr(model, "max_positions", None)  # past it, a long enough text was an index error mid-run
    if limit is not None and data.max_length > limit:
        raise CutlabError(f"data.max_length={data.max_length} is more tokens than model={model_cfg.name} "
                          f"({model_cfg.source}) can place ({limit} positions); set data.max_length={limit} or less")
    if model_cfg.tokenizer is not None and model_cfg.get("pretrained", True):  # a random init reads any vocabulary
        check_same_vocabulary(tokenizer, model_cfg.tokenizer, model_cfg.source, load_tokenizer)
    say(cfg, f"model {model_cfg.name} from {resolve_source(model_cfg.source)} ready "
             f"({time.perf_counter() - started:.1f} s)")

    train, val, test = read_splits(cfg)
    say(cfg, f"{data.name}: {len(train)} train, {len(val)} validation, {len(test)} test examples")
    sets = [cached_tokenize(examples, tokenizer, data.max_length, name, cfg.progress, cfg.paths.cache_dir)
            for examples, name in ((train, "train"), (val, "validation"), (test, "test"))]
    # sigma_x (the paper's noise scale, Sec. 5): std of the embedded training tokens, or of the whole embedding table
    if model_cfg.sigma == "tokens":
        sigma = token_embedding_std(table, sets[0].encodings["input_ids"])
    elif model_cfg.sigma == "table":
        sigma = float(table.detach().float().std())
    else:
        raise CutlabError(f"model.sigma must be tokens or table, got {model_cfg.sigma!r}; e.g. model.sigma=tokens")
    source = f"{data.root} ({data.train_file}, {data.test_file})" if not str(data.root).startswith("hf:") else str(data.root)
    return Task(model=model, objective=ClassificationObjective(), train_set=sets[0], val_set=sets[1], test_set=sets[2],
                prepare=classification_batch, sigma=sigma, source=source)
