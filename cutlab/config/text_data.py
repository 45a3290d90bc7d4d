"""The values a text data config needs (data=imdb, data=mnli), checked with the run's other values before the run
announces its record folder: its task builder found them only once the run had begun."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from cutlab.errors import CutlabError

MNLI_CLASSES = 3  # read_mnli's labels: 0 entailment, 1 neutral, 2 contradiction


def check_text_data(data: DictConfig) -> None:
    """The text data keys a run needs, each with a valid example (before any model is loaded)."""
    def whole(key: str, minimum: int, example: str, optional: bool = False) -> None:
        value = data.get(key)
        if optional and value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise CutlabError(f"data.{key} must be a whole number >= {minimum}, got {value!r}; e.g. data.{key}={example}")

    root = data.get("root")
    if isinstance(root, str) and not root.startswith("hf:") and Path(root).expanduser().is_file():  # the readers
        path = Path(root).expanduser()  # would list the folder it is not, and find nothing
        raise CutlabError(f"data.root={root} is a file; data.root names the folder of the data's files: "
                          f"data.root={path.parent} data.train_file={path.name} (and data.test_file=...)")
    whole("max_length", 2, "128")
    whole("num_labels", 2, "2")
    if data.get("name") == "mnli" and data.num_labels != MNLI_CLASSES:  # its reader gives each row one of the three
        raise CutlabError(f"data=mnli has {MNLI_CLASSES} classes (entailment, neutral, contradiction), not "
                          f"data.num_labels={data.num_labels}: drop the override (or set data.num_labels={MNLI_CLASSES})")
    whole("train_subset", 1, "2000 (or null for all)", optional=True)
    whole("test_subset", 1, "500 (or null for all)", optional=True)
    whole("subset_seed", 0, "0")
    val = data.get("val_size")
    if isinstance(val, bool) or not isinstance(val, (int, float)) or val <= 0 or (isinstance(val, float) and val >= 1):
        raise CutlabError(f"data.val_size must be a fraction in (0, 1) or a count >= 1, got {val!r}; e.g. data.val_size=0.1")
