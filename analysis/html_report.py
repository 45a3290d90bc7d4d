"""``report.html``: the Markdown report as one file a browser opens, every figure embedded in it.

The text is report.md's, rendered by markdown-it-py (CommonMark plus tables; raw HTML in the Markdown is
escaped, never passed through: run names and error messages come from the records). Each figure's PNG is
embedded as a ``data:`` URI, so the file can be mailed or attached alone; the links to the PDFs and the table
files stay relative, as in report.md, and work beside the report folder.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from markdown_it import MarkdownIt

from cutlab.atomic import write_atomic

from .out_folder import HTML_TITLE

HTML = "report.html"
STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; max-width: 1100px;
       margin: 2em auto; padding: 0 1em; line-height: 1.45; color: #1a1a1a; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; display: block; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
td:first-child { overflow-wrap: anywhere; min-width: 12em; }  /* long run names wrap instead of widening */
th { background: #f0f3f7; }
tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; height: auto; border: 1px solid #e4e4e4; }
code { background: #f3f3f3; padding: 0 0.2em; }
pre { background: #f3f3f3; padding: 0.6em; overflow-x: auto; }
h1, h2, h3 { border-bottom: 1px solid #e4e4e4; padding-bottom: 0.2em; }
"""
_IMAGE = re.compile(r'<img src="([^"]+\.png)"')
_CODE = re.compile(r"(```.*?```|`[^`\n]*`)", re.DOTALL)


def write_html(markdown_text: str, out_dir: Path, title: str = HTML_TITLE) -> Path:
    """Render ``markdown_text`` (report.md's text) to ``out_dir/report.html`` with its PNG figures embedded."""
    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(_literal_underscores(markdown_text))
    body = _IMAGE.sub(lambda match: f'<img src="{_embedded(out_dir, match.group(1))}"', body)
    page = (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n")
    path = out_dir / HTML
    write_atomic(path, page)  # a full disk leaves the earlier report.html, never a cut-off one
    return path


def _literal_underscores(text: str) -> str:
    """Underscores as text, outside code: run names (``_0,0.5_`` in ``eval.gamma_test=_0,0.5_``) and record keys are
    full of them, and the report emphasises with ``**`` only; a code span shows its backslashes, so it is left alone."""
    parts = _CODE.split(text)
    return "".join(part if k % 2 else part.replace("_", "\\_") for k, part in enumerate(parts))


def _embedded(out_dir: Path, source: str) -> str:
    """A figure's PNG as a data URI; a figure file that is missing keeps its relative link (the browser says so)."""
    file = out_dir / html.unescape(source)
    if not file.is_file():
        return source
    return "data:image/png;base64," + base64.b64encode(file.read_bytes()).decode("ascii")
