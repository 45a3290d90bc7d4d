"""Readers for the text classification sets, in their real on-disk formats -> lists of labelled examples.

An example is ``(text, text_pair, label)``; ``text_pair`` is None for single-text tasks (IMDb) and the hypothesis
for MNLI, whose premise and hypothesis are encoded as one pair (paper Sec. 5, App. B.3).

- IMDb: a folder of JSON lines ``{"text", "label"}`` (optionally gzip), the official ``aclImdb/`` layout
  (``{train,test}/{pos,neg}/*.txt``), or ``hf:<dataset id>`` through Hugging Face ``datasets``.
- MNLI: GLUE TSV (``train.tsv``, ``dev_matched.tsv``: sentence1, sentence2, gold_label), MultiNLI / jiant
  JSON lines (``sentence1``/``sentence2``/``gold_label`` or ``premise``/``hypothesis``/``label``), or ``hf:``.
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
import zlib
from pathlib import Path
from typing import Iterator, Optional

from cutlab.core.errors import CutlabError

Example = tuple[str, Optional[str], int]

MNLI_LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2}  # GLUE's order (also Hugging Face's)
# rows without a gold label: unlabelled test rows (null, -1) and MultiNLI's no-consensus rows ("-"), which GLUE drops
MNLI_UNLABELLED = (None, "", "-", -1)


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text file, gzip'd where it ends in .gz; a file that is not UTF-8 text or not a whole
    gzip stream stops in one line (they were tracebacks, and left the run's folder behind)."""
    number = 0
    try:
        with _open_text(path) as handle:
            for number, line in enumerate(handle, start=1):
                yield number, line
    except UnicodeDecodeError as error:  # decoded a block at a time: the line is where the block began, or after
        raise CutlabError(f"{path} is not UTF-8 text ({error.reason}, from line {number + 1} on); save it as UTF-8, "
                          "or point data.root at the data set's own files") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise CutlabError(f"{path} is not a whole gzip file ({error}); copy it again, or unpack it and name the "
                          "unpacked file") from None


def _json_lines(path: Path) -> Iterator[tuple[int, dict]]:
    for number, line in _lines(path):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise CutlabError(f"{path}:{number} is not valid JSON ({error}); the file must hold one JSON object a line") from error
            if not isinstance(row, dict):  # a list or number row was a TypeError deep in the reader
                raise CutlabError(f"{path}:{number} is a JSON {type(row).__name__}, not an object; the file must hold "
                                  "one JSON object a line, with its fields named")
            yield number, row


def _text(value, where: str, key: str) -> str:
    if not isinstance(value, str):  # the tokenizer's TypeError said nothing of the file
        raise CutlabError(f"{where}: {key!r} must be a string, got {value!r}")
    return value


def hf_split(dataset_id: str, split: str):
    """A split of a Hugging Face dataset (``hf:imdb`` or ``hf:glue/mnli``); ``datasets`` is an optional dependency."""
    try:
        import datasets
    except ImportError as error:
        raise CutlabError(f"data.root=hf:{dataset_id} needs the Hugging Face 'datasets' package: pip install datasets "
                          "(or point data.root at a local copy of the files)") from error
    name, _, config = dataset_id.partition("/") if dataset_id.startswith("glue/") else (dataset_id, "", "")
    try:
        return datasets.load_dataset(name, config or None, split=split)
    except Exception as error:  # noqa: BLE001 - datasets raises many kinds; all mean "not available here"
        raise CutlabError(f"cannot load split {split!r} of Hugging Face dataset {dataset_id!r} (offline with no cache, "
                          f"or a wrong id): {type(error).__name__}: {str(error)[:200]}") from error


def _listing(folder: Path) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())[:12] if folder.is_dir() else []
    return ", ".join(names) or "nothing"


# ----------------------------------------------------------------------------------------------------- IMDb

def _imdb_label(value, where: str, num_labels: int) -> int:
    """0 .. num_labels - 1: IMDb's sentiment, or the classes of other text a run declares with data.num_labels."""
    if value in range(num_labels) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, bool):  # JSON's true/false: its type is what is wrong, as for a string
        raise CutlabError(f"{where}: label must be a number, got the boolean {str(value).lower()}; write it as a "
                          f'number, 0 .. {num_labels - 1} ("label": {int(value)})')
    if isinstance(value, str):  # "1": its type is what is wrong, and data.num_labels cannot help
        example = value.strip() if value.strip() in map(str, range(num_labels)) else None
        raise CutlabError(f"{where}: label must be a number, got the string {value!r}; write it as a number"
                          + (f' ("label": {example})' if example else f', 0 .. {num_labels - 1} ("label": 0)'))
    # the refusal names the key that lets more classes in, to train on them: cutlab-eval's run was trained on
    # num_labels classes, and its readout cannot score more (the same words there sent its user to a refusal)
    if num_labels == 2:
        raise CutlabError(f"{where}: IMDb label must be 0 (negative) or 1 (positive), got {value!r}; for text of more "
                          "classes (labels 0 .. N-1) train with data.num_labels=N (a model trained on 2 classes "
                          "cannot score it)")
    raise CutlabError(f"{where}: label must be 0 .. {num_labels - 1} (data.num_labels={num_labels}), got {value!r}; "
                      f"train with data.num_labels set to the number of classes (a model trained on {num_labels} "
                      "cannot score more)")


def _acl_imdb_folder(root: Path) -> Path | None:
    for candidate in (root, root / "aclImdb"):
        if (candidate / "train" / "pos").is_dir() and (candidate / "test" / "neg").is_dir():
            return candidate
    return None


def read_imdb(root: str, split: str, file: str, num_labels: int = 2) -> list[Example]:
    """IMDb split ``train`` or ``test`` from ``root`` (see module docstring); ``file`` names the JSON-lines file, whose
    labels are 0 .. ``num_labels`` - 1."""
    if str(root).startswith("hf:"):
        rows = hf_split(str(root)[3:], split)
        return [(row["text"], None, _imdb_label(row["label"], f"hf:{root} {split}", num_labels)) for row in rows]
    folder = Path(root).expanduser()
    acl = _acl_imdb_folder(folder)
    if acl is not None:
        examples = []
        for label, polarity in ((0, "neg"), (1, "pos")):
            for path in sorted((acl / split / polarity).glob("*.txt")):
                text = "".join(line for _, line in _lines(path))
                # kept as written, <br /> included, as in the JSON lines and hf:imdb: one data set, one text
                examples.append((text, None, label))
        if not examples:
            raise CutlabError(f"{acl}/{split}/{{pos,neg}}/ holds no .txt reviews; is the aclImdb download complete?")
        return examples
    path = folder / file
    if not path.is_file():
        raise CutlabError(
            f"data.root={root} is not an IMDb folder: expected JSON lines {file} there (data.{split}_file=...) "
            f"or the official layout aclImdb/{{train,test}}/{{pos,neg}}/*.txt; found {_listing(folder)}. "
            f"e.g. data.root=../shared/data/imdb, data.root=/path/to/aclImdb, or data.root=hf:imdb"
        )
    examples = []
    for number, row in _json_lines(path):
        if "text" not in row or "label" not in row:
            raise CutlabError(f"{path}:{number} lacks 'text' or 'label' (has {sorted(row)}); IMDb rows are {{\"text\", \"label\"}}")
        where = f"{path}:{number}"
        examples.append((_text(row["text"], where, "text"), None, _imdb_label(row["label"], where, num_labels)))
    if not examples:
        raise CutlabError(f"{path} holds no reviews")
    return examples


# ----------------------------------------------------------------------------------------------------- MNLI

def mnli_label(value, where: str) -> int | None:
    """0/1/2 for a gold label (name or GLUE index, as a number or as a TSV's text), None for an unlabelled row;
    anything else is an error."""
    if isinstance(value, str) and value.strip() in ("-1", "0", "1", "2"):  # a TSV's cells are text: GLUE's indices
        value = int(value)
    if value in MNLI_UNLABELLED:
        return None
    if isinstance(value, str) and value.strip().lower() in MNLI_LABELS:
        return MNLI_LABELS[value.strip().lower()]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2:
        return value
    raise CutlabError(f"{where}: MNLI label must be one of entailment, neutral, contradiction (or 0, 1, 2), got {value!r}")


def _mnli_rows(path: Path) -> Iterator[tuple[str, str, object, str]]:
    if path.suffix == ".tsv" or path.name.endswith(".tsv.gz"):
        reader = csv.DictReader((line for _, line in _lines(path)), delimiter="\t", quoting=csv.QUOTE_NONE)
        columns = set(reader.fieldnames or [])
        if not {"sentence1", "sentence2"} <= columns:
            raise CutlabError(f"{path} is not a GLUE MNLI TSV: its header lacks sentence1/sentence2 (has {sorted(columns)[:8]})")
        label_key = "gold_label" if "gold_label" in columns else "label" if "label" in columns else None
        for number, row in enumerate(reader, start=2):  # a short row's missing cells are None
            where = f"{path}:{number}"
            yield _text(row["sentence1"], where, "sentence1"), _text(row["sentence2"], where, "sentence2"), \
                row.get(label_key) if label_key else None, where
        return
    for number, row in _json_lines(path):
        premise = row.get("premise", row.get("sentence1"))
        hypothesis = row.get("hypothesis", row.get("sentence2"))
        if premise is None or hypothesis is None:
            raise CutlabError(f"{path}:{number} lacks premise/hypothesis (or sentence1/sentence2); has {sorted(row)}")
        where = f"{path}:{number}"
        yield _text(premise, where, "premise"), _text(hypothesis, where, "hypothesis"), \
            row.get("label", row.get("gold_label")), where


def _mnli_hf_split(split: str, file: str) -> str:
    """The Hugging Face split of ``hf:glue/mnli`` that ``data.{split}_file`` names: MNLI has two labelled test sets,
    and a file named for the mismatched one was read as the matched one."""
    if split == "train":
        return "train"
    for name in ("mismatched", "matched"):  # mismatched first: its name holds the other's
        if name in file.lower():
            return f"validation_{name}"
    raise CutlabError(f"data.test_file={file} names neither MNLI test set; with data.root=hf:glue/mnli set "
                      "data.test_file=dev_matched.tsv (validation_matched) or dev_mismatched.tsv "
                      "(validation_mismatched)")


def read_mnli(root: str, split: str, file: str) -> list[Example]:
    """Labelled MNLI pairs of ``file`` in ``root`` (``split`` names the Hugging Face split with ``hf:``)."""
    if str(root).startswith("hf:"):
        hf_name = _mnli_hf_split(split, file)
        rows = hf_split(str(root)[3:], hf_name)
        examples = [(r["premise"], r["hypothesis"], mnli_label(r["label"], f"{root} {hf_name}")) for r in rows]
        return [e for e in examples if e[2] is not None]
    path = Path(root).expanduser() / file
    if not path.is_file():
        raise CutlabError(
            f"data.root={root} has no MNLI file {file} (data.{split}_file=...); found {_listing(Path(root).expanduser())}. "
            "Expected GLUE's MNLI folder (train.tsv, dev_matched.tsv), MultiNLI JSON lines "
            "(multinli_1.0_train.jsonl, multinli_1.0_dev_matched.jsonl), or data.root=hf:glue/mnli"
        )
    examples, skipped = [], 0
    for premise, hypothesis, raw, where in _mnli_rows(path):
        label = mnli_label(raw, where)
        if label is None:
            skipped += 1
        else:
            examples.append((premise, hypothesis, label))
    if skipped:
        print(f"[cutlab] {path.name}: skipped {skipped} rows without a gold label", file=sys.stderr)
    if not examples:
        raise CutlabError(f"{path} holds no labelled MNLI rows")
    return examples
