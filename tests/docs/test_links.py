"""README.md and docs/*.md: every relative link and every backquoted `../` path points at
a file inside the repository (a link to a file outside it dangles for every reader)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
OUTSIDE = re.compile(r"`(\.\./[^`]+)`")


def test_relative_links_stay_inside_the_repository() -> None:
    problems = []
    for page in PAGES:
        text = page.read_text()
        for target in LINK.findall(text):
            if re.match(r"[a-z]+://|mailto:|#", target):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.is_relative_to(REPO) or not path.exists():
                problems.append(f"{page.relative_to(REPO)}: ({target})")
        # A path in backquotes is relative to the page's folder, or to one of its subfolders
        # when a table lists that subfolder's files (docs/benchmarks.md).
        bases = [page.parent, *(d for d in page.parent.iterdir() if d.is_dir())]
        for target in OUTSIDE.findall(text):
            if not any((base / target).resolve().is_relative_to(REPO)
                       and (base / target).resolve().exists() for base in bases):
                problems.append(f"{page.relative_to(REPO)}: `{target}`")
    assert problems == []


def test_anchors_of_links_between_pages_exist() -> None:
    def anchors(page: Path) -> set[str]:
        return {re.sub(r"[^a-z0-9 -]", "", h.lower()).strip().replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", page.read_text(), re.M)}

    problems = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+://", target) or "#" not in target:
                continue
            file_part, anchor = target.split("#", 1)
            linked = (page.parent / file_part).resolve() if file_part else page
            if linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{page.relative_to(REPO)}: ({target})")
    assert problems == []
