"""Text from a run record, made inert in Markdown: a model name holding HTML or Markdown syntax is shown as
written, and cannot hide the rest of the report (``<!--``), break a table (``|``) or load an image (``![](...)``)."""

from __future__ import annotations

import html

_STRUCTURE = str.maketrans({"\\": "\\\\", "`": "\\`", "[": "\\[", "]": "\\]", "|": "\\|", "*": "\\*", "\n": " ",
                            "\r": " "})


def inert(value) -> str:
    """``value`` as literal text in Markdown (HTML escaped; ``*`` too, so a folder named ``*new*`` is not set in italics;
    underscores are the HTML page's to keep as text: analysis.html_report)."""
    return html.escape(str(value), quote=False).translate(_STRUCTURE)
