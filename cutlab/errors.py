"""``CutlabError``, defined in cutlab.core.errors (core imports nothing above it) and raised everywhere."""

from cutlab.core.errors import CutlabError

__all__ = ["CutlabError", "refuse_blank"]


def refuse_blank(name: str, value, fix: str) -> None:
    """``name`` given empty, as an unset variable gives it (``KEY=$VAR``, ``--flag "$VAR"``): one line with ``fix``.
    As a path '' is the current folder and as a name it is none, so each such value fell to another default, unsaid."""
    if value is not None and not str(value).strip():
        raise CutlabError(f"{name} is empty; {fix}")
