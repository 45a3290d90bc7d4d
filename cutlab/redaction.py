"""Credentials never leave the process: URLs and arguments are redacted before any record, log or message.

Handles every URL form a storage or data address may take, whatever its scheme: ``user:password@host``
(the password may itself hold ``@``: the host follows the *last* ``@``), ``?password=...`` and its
relatives (``token=``, ``secret=``, ``api_key=``), libpq's ``password=...`` keyword form, and variables named for
them (``PGPASSWORD=...``, ``WANDB_API_KEY=...``).
"""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, unquote

HIDDEN = "***"
# key=value pairs whose value is a credential, in a query string, a libpq DSN, an option (--db-password=...) or an
# environment variable a setup line exports (PGPASSWORD=, WANDB_API_KEY=, HF_TOKEN=: a prefix of the key's own); the
# value runs to '&' (a query's next pair) or the word's end, not to '#', ',', ';' or a quote, which a password may hold
_SECRET_KEY = r"(?i)(?<![A-Za-z0-9_.])([A-Za-z0-9_]*?(?:password|passwd|pwd|secret|token|api[_-]?key))"
_SECRET_PAIR = re.compile(rf"{_SECRET_KEY}=([^&\s]+)")
# libpq's keyword/value form (host=db password='open SESAME'): a quoted value holds spaces and the escapes \' and \\,
# so the pair spans words; an unclosed quote is hidden to the line's end, never past it
_QUOTED = r"'(?:[^'\\\n]|\\.)*(?:'|(?=\n)|$)"
_QUOTED_PAIR = re.compile(rf"{_SECRET_KEY}={_QUOTED}")
# libpq also allows spaces around '=' (password = x): its own key only, on one line (a spaced '=' after any *token
# key hid prose: "the pad_token = eos_token" lost its next word, "api_key = " the next line's)
_SPACED_PASSWORD = re.compile(rf"(?i)(?<![A-Za-z0-9_.])(password)(?:[ \t]+=[ \t]*|=[ \t]+)({_QUOTED}|[^\s']\S*)")
# user:password@ whose password holds whitespace, which splits it over words: up to the last '@' on the line short of
# another address's '://' (a password may hold '@' and '/'; an error's advice 'postgresql://USER:PASSWORD@HOST' hid
# the address before it). Not where what follows 'host:' is a port (digits, then a space, '/' or the end) or a space:
# 'http://localhost:8080 owner x@y' hid '8080 owner x'
_NOT_ANOTHER_URL = r"(?:(?!://)[^\n])*"
_SPACED_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]+:)(?!\s|\d+(?:[\s/]|$))"
                              rf"({_NOT_ANOTHER_URL}\s{_NOT_ANOTHER_URL})@")


def redact(text: str) -> str:
    """``text`` with every credential replaced by ***; whitespace-separated words are redacted one by one."""
    text = _libpq_hidden(_SPACED_USERINFO.sub(lambda url: f"{url.group(1)}{HIDDEN}@", str(text)))
    return re.sub(r"\S+", lambda word: _redact_word(word.group(0)), text)


def _password_span(word: str) -> tuple[int, int] | None:
    """Where the password of ``scheme://user:password@host...`` starts and ends; None without one."""
    scheme = word.find("://")
    at = word.rfind("@")  # the host follows the last '@': a password may hold '@' itself
    colon = word.find(":", scheme + 3, at) if scheme >= 0 and at > scheme else -1
    return (colon + 1, at) if colon >= 0 else None  # user@host keeps its user: it is not a secret


def _hidden_pair(pair: re.Match) -> str:
    """``key=***``; in a quoted address ('...?password=x', ...) the quote that closes it, and what follows, stay."""
    value, opened = pair.group(2), pair.string[:pair.start()]
    quotes = [value.rindex(quote) for quote in "'\"" if quote in opened and quote in value]
    return f"{pair.group(1)}={HIDDEN}{value[max(quotes):] if quotes else ''}"


def _libpq_hidden(text: str) -> str:
    """libpq's pairs that span words hidden as ``key=***``: a quoted value, or a password after a spaced '=' (a
    plain ``key=value`` is the word rule's, which keeps a quoted address's closing quote)."""
    hidden = lambda pair: f"{pair.group(1)}={HIDDEN}"  # noqa: E731
    return _SPACED_PASSWORD.sub(hidden, _QUOTED_PAIR.sub(hidden, text))


def _redact_word(word: str) -> str:
    word = _SECRET_PAIR.sub(_hidden_pair, _libpq_hidden(word))  # an argument may hold spaces
    span = _password_span(word)
    return word if span is None else f"{word[:span[0]]}{HIDDEN}{word[span[1]:]}"


def with_encoded_password(url: str) -> str:
    """``url`` with a raw ``@`` in its password percent-encoded, as URL parsers (SQLAlchemy, libpq) need: they
    end the password at the first ``@`` and would take the rest of it for the host name."""
    span = _password_span(url)
    if span is None or "@" not in url[span[0]:span[1]]:
        return url
    return f"{url[:span[0]]}{quote(url[span[0]:span[1]], safe='%')}{url[span[1]:]}"


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's error message about ``url``) redacted, and without any piece of ``url``'s password."""
    text = redact(text)
    span = _password_span(url)
    if span is not None:
        password = url[span[0]:span[1]]
        for secret in sorted({password, unquote(password), *password.split("@")}, key=len, reverse=True):
            if len(secret) >= 3:
                text = text.replace(secret, HIDDEN)
    return text


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
