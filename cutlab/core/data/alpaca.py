"""Alpaca instruction data: rows {instruction, input, output} -> token ids with the prompt masked out of the loss.

The prompt template is Stanford Alpaca's (github.com/tatsu-lab/stanford_alpaca, train.py): the model is
trained on the response only, so prompt tokens get label -100 (ignored by the cross-entropy).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from cutlab.core.errors import CutlabError
from cutlab.core.progress import Meter

IGNORE = -100  # label of a token that does not count in the loss (PyTorch's cross_entropy ignore_index)

PROMPT_WITH_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:"
)
PROMPT_NO_INPUT = (
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:"
)

HOW_TO_GET = ("download Stanford Alpaca's alpaca_data.json "
              "(https://github.com/tatsu-lab/stanford_alpaca/blob/main/alpaca_data.json) and pass "
              "data.root=/path/to/alpaca_data.json (a JSON list or JSON-lines file of {instruction, input, output})")


@dataclass(frozen=True)
class Example:
    instruction: str
    input: str
    output: str


def prompt_of(example: Example) -> str:
    if example.input:
        return PROMPT_WITH_INPUT.format(instruction=example.instruction, input=example.input)
    return PROMPT_NO_INPUT.format(instruction=example.instruction)


def root_not_set() -> CutlabError:
    """load_examples' line for an unset data.root; the config checks refuse the run with it before it starts."""
    return CutlabError(f"data.root is not set: {HOW_TO_GET}")


def load_examples(root: str | None) -> list[Example]:
    """Rows of a JSON list (``alpaca_data.json``) or a JSON-lines file; every row is checked, errors name it."""
    if root is None:
        raise root_not_set()
    path = Path(root).expanduser()  # as the other text readers: a ~ of the command line's quoting stays
    if not path.is_file():
        raise CutlabError(f"data.root={root} is not a file: {HOW_TO_GET}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise CutlabError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start}); "
                          "save it as UTF-8") from None
    try:
        if text.lstrip().startswith("["):
            rows = json.loads(text)
        else:  # JSON lines: one object per non-empty line
            rows = []
            for number, line in enumerate(text.splitlines(), start=1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as error:
                        raise CutlabError(f"{path}: line {number} is not valid JSON ({error.msg}); "
                                          "each line must be one {instruction, input, output} object") from None
    except json.JSONDecodeError as error:
        raise CutlabError(f"{path} is not valid JSON ({error.msg} at line {error.lineno}); "
                          "expected a list of {instruction, input, output} objects like alpaca_data.json") from None
    if not rows:
        raise CutlabError(f"{path} holds no examples; {HOW_TO_GET}")
    return [_example(row, index, path) for index, row in enumerate(rows)]


def _example(row, index: int, path: Path) -> Example:
    where = f"{path}: row {index}"
    if not isinstance(row, dict):
        raise CutlabError(f"{where} is a {type(row).__name__}, not an object with keys instruction, input, output")
    for key in ("instruction", "output"):
        if not isinstance(row.get(key), str):
            raise CutlabError(f"{where} needs a string {key!r} (has keys {sorted(row)}); "
                              'e.g. {"instruction": "Name a colour.", "input": "", "output": "Blue."}')
    if not row["instruction"].strip():
        raise CutlabError(f"{where} has an empty 'instruction'")
    extra = row.get("input", "")
    if not isinstance(extra, str):
        raise CutlabError(f"{where}: 'input' must be a string (\"\" when the task has none), got {type(extra).__name__}")
    return Example(row["instruction"], extra, row["output"])


def tokenize_example(example: Example, tokenizer, max_length: int) -> dict[str, torch.Tensor]:
    """[bos] prompt response [eos], cut to ``max_length``; labels copy the ids with the prompt part set to -100.

    Prompt and response are tokenized separately, so the mask boundary is exact (tokenizing the joined
    text can merge the last prompt token with the first response token).
    """
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    prompt = bos + tokenizer(prompt_of(example), add_special_tokens=False)["input_ids"]
    response = tokenizer(example.output, add_special_tokens=False)["input_ids"] + eos
    ids = (prompt + response)[:max_length]
    labels = ([IGNORE] * len(prompt) + response)[:max_length]
    return {"input_ids": torch.tensor(ids, dtype=torch.long), "labels": torch.tensor(labels, dtype=torch.long)}


class InstructionSet:
    """Tokenized examples; ``collate`` right-pads a batch and adds the attention mask."""

    def __init__(self, samples: list[dict[str, torch.Tensor]], pad_id: int) -> None:
        self.samples, self.pad_id = samples, pad_id

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.samples[index]

    def collate(self, samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        width = max(len(s["input_ids"]) for s in samples)
        ids = torch.full((len(samples), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(samples), width), IGNORE, dtype=torch.long)
        mask = torch.zeros((len(samples), width), dtype=torch.long)
        for row, sample in enumerate(samples):
            length = len(sample["input_ids"])
            ids[row, :length], labels[row, :length], mask[row, :length] = sample["input_ids"], sample["labels"], 1
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def instruction_batch(batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """A task's ``prepare``: (model inputs, labels)."""
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}, batch["labels"]


@dataclass
class InstructionSplits:
    train: InstructionSet
    val: InstructionSet
    test: InstructionSet
    dropped: int  # examples whose response was cut away entirely by max_length


def split_examples(count: int, val_fraction: float, test_fraction: float, seed: int) -> tuple[list, list, list]:
    """Index lists (train, val, test) of a seeded permutation: Alpaca ships one file, the held-out sets come from it.

    Each held-out set gets at least one example, so a tiny file still yields all three splits.
    """
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed)).tolist()
    n_val, n_test = max(1, round(val_fraction * count)), max(1, round(test_fraction * count))
    if n_val + n_test >= count:
        raise CutlabError(f"{count} examples are too few for data.val_fraction={val_fraction} and "
                          f"data.test_fraction={test_fraction} (each held-out set needs at least 1, and training too)")
    return order[n_val + n_test:], order[:n_val], order[n_val:n_val + n_test]


def check_data_config(data_cfg) -> None:
    """The instruction-data keys, checked before any file is read (the generic keys are in cutlab/config/checks.py)."""
    length = data_cfg.max_length
    if isinstance(length, bool) or not isinstance(length, int) or length < 2:
        raise CutlabError(f"data.max_length must be a whole number >= 2, got {length!r}; e.g. data.max_length=512")
    if data_cfg.subset is not None and (isinstance(data_cfg.subset, bool) or not isinstance(data_cfg.subset, int)
                                        or data_cfg.subset < 3):
        raise CutlabError(f"data.subset must be null or a whole number >= 3, got {data_cfg.subset!r}; e.g. data.subset=2000")
    for key in ("val_fraction", "test_fraction"):
        value = data_cfg[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise CutlabError(f"data.{key} must be a number between 0 and 1, got {value!r}; e.g. data.{key}=0.05")


def load_instruction_splits(data_cfg, tokenizer, progress: bool = True,
                            examples: list[Example] | None = None) -> InstructionSplits:
    """``examples``: data.root's, when the caller has read them already."""
    check_data_config(data_cfg)
    examples = load_examples(data_cfg.root) if examples is None else examples
    if data_cfg.subset is not None:
        examples = examples[: data_cfg.subset]  # the first rows of the file: quick runs on part of Alpaca
    train, val, test = split_examples(len(examples), data_cfg.val_fraction, data_cfg.test_fraction,
                                      data_cfg.split_seed)
    dropped = 0

    def tokenized(indices: list[int]) -> InstructionSet:
        nonlocal dropped
        samples = []
        meter = Meter("tokenizing", len(indices), "example", enabled=progress)
        for done, index in enumerate(indices, start=1):
            sample = tokenize_example(examples[index], tokenizer, data_cfg.max_length)
            if (sample["labels"] != IGNORE).any():
                samples.append(sample)
            else:
                dropped += 1
            if done % 500 == 0 or done == len(indices):
                meter.update(done)
        meter.close()
        return InstructionSet(samples, tokenizer.pad_token_id)

    splits = InstructionSplits(tokenized(train), tokenized(val), tokenized(test), 0)
    splits.dropped = dropped
    if dropped and progress:
        print(f"[cutlab] {dropped} examples dropped: their prompt fills data.max_length={data_cfg.max_length}",
              file=sys.stderr, flush=True)
    for name in ("train", "val", "test"):
        if len(getattr(splits, name)) == 0:
            raise CutlabError(f"the {name} split is empty after truncation: every prompt there is longer than "
                              f"data.max_length={data_cfg.max_length}; raise it (e.g. data.max_length=512)")
    return splits
