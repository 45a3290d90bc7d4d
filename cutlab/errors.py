"""``CutlabError``, defined in cutlab.core.errors (core imports nothing above it) and raised everywhere."""

from cutlab.core.errors import CutlabError

__all__ = ["CutlabError"]
