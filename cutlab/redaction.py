"""Credentials never leave the process: URLs and arguments are redacted before any record, log or message.

Handles every URL form a storage or data address may take, whatever its scheme: ``user:password@host``
(the password may itself hold ``@``: the host follows the *last* ``@``), ``?password=...`` and its
relatives (``token=``, ``secret=``, ``api_key=``), and libpq's ``password=...`` keyword form.
"""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from typing import Any

HIDDEN = "***"
# key=value pairs whose value is a credential, in a query string, a libpq DSN or an option (--db-password=...)
_SECRET_PAIR = re.compile(
    r"(?i)(?<![A-Za-z0-9_.])((?:ssl)?password|passwd|pwd|secret|token|access_token|api[_-]?key)=[^&#\s'\",;]+"
)


def redact(text: str) -> str:
    """``text`` with every credential replaced by ***; whitespace-separated words are redacted one by one."""
    return re.sub(r"\S+", lambda word: _redact_word(word.group(0)), str(text))


def _redact_word(word: str) -> str:
    word = _SECRET_PAIR.sub(lambda pair: f"{pair.group(1)}={HIDDEN}", word)
    scheme = word.find("://")
    if scheme < 0:
        return word
    start = scheme + 3
    at = word.rfind("@")  # the host follows the last '@': a password may hold '@' itself
    colon = word.find(":", start, at)
    if at < start or colon < 0:
        return word  # no user:password part (user@host keeps its user: it is not a secret)
    return f"{word[:colon + 1]}{HIDDEN}{word[at:]}"


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with its credentials hidden; each argument is one word even if it holds spaces."""
    return [_redact_word(argument) for argument in argv]


def redact_values(data: Any) -> Any:
    """A config (dicts, lists, strings) with every string value redacted."""
    if isinstance(data, dict):
        return {key: redact_values(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(redact_values(value) for value in data)
    return _redact_word(data) if isinstance(data, str) else data


@contextmanager
def redacted_argv():
    """``sys.argv`` redacted while libraries read it (W&B stores the command line in its run metadata)."""
    original = sys.argv
    sys.argv = redact_argv(original)
    try:
        yield
    finally:
        sys.argv = original
