"""docs/checks.md (what each check compares, its inputs and how its tolerance is derived) as
the page ``/checks`` shows it, so that every check on a report links to its own row.

Rendered with markdown-it-py (CommonMark plus tables; already installed: rich depends on it),
raw HTML off. Ids added to the token stream before rendering:

- each heading: a slug of its text (``tolerance``, ``the-checks``; a repeat gets ``-2``, ...);
  a top-level heading naming an assignment in backticks (``# The `softmax_backward` checks``)
  gets the assignment's name as its id;
- each table row whose first cell is a check's name, under an assignment's heading:
  ``<assignment>-<check>`` (``check_anchor``), the target of the report's links.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

#: The document in a checkout and in the API image (docker/api.Dockerfile copies docs/checks.md).
CHECKS_MD = Path(__file__).resolve().parents[2] / "docs" / "checks.md"
#: Where the pages serve it.
CHECKS_PATH = "/checks"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def check_anchor(assignment: str, check: str) -> str:
    """The id of `check`'s row in the served document (``softmax_backward-half_precision``)."""
    return f"{assignment}-{check}"


def check_url(assignment: str, check: str) -> str:
    """The link from a report's check to its row in ``/checks``."""
    return f"{CHECKS_PATH}#{check_anchor(assignment, check)}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "-", text.lower()).strip("-") or "section"


def render_checks_markdown(text: str) -> str:
    """`text` (Markdown) as HTML with the ids above. Raises nothing for any input."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens: list[Token] = md.parse(text)
    seen: dict[str, int] = {}
    assignment: str | None = None
    for index, token in enumerate(tokens):
        inline = tokens[index + 1] if index + 1 < len(tokens) else None
        if token.type == "heading_open" and inline is not None:
            code = [c.content for c in inline.children or [] if c.type == "code_inline"]
            if token.tag == "h1":
                assignment = code[0] if code and _NAME.match(code[0]) else None
            slug = assignment if token.tag == "h1" and assignment else _slug(inline.content)
            seen[slug] = seen.get(slug, 0) + 1
            token.attrSet("id", slug if seen[slug] == 1 else f"{slug}-{seen[slug]}")
        elif token.type == "tr_open" and assignment is not None and index + 2 < len(tokens):
            cell = tokens[index + 2]
            if tokens[index + 1].type == "td_open" and cell.type == "inline" and _NAME.match(cell.content.strip()):
                token.attrSet("id", check_anchor(assignment, cell.content.strip()))
    html = md.renderer.render(tokens, md.options, {})
    # Wide tables scroll inside their own box, so that the page fits a phone's width; the box
    # takes the keyboard focus, so it can be scrolled without a mouse.
    parts = html.split("<table>")
    html = parts[0] + "".join(
        f'<div class="scroll" tabindex="0" role="region" aria-label="table {number}"><table>{part}'
        for number, part in enumerate(parts[1:], start=1))
    return html.replace("</table>", "</table></div>")


@functools.cache
def checks_html() -> str | None:
    """docs/checks.md rendered (read once), or None where the file is not installed."""
    try:
        return render_checks_markdown(CHECKS_MD.read_text(encoding="utf-8"))
    except OSError:
        return None
