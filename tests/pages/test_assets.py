"""The vendored front-end assets (api/pages/static/vendor) are the published npm files that
scripts/vendor_assets.py recorded: same bytes, each with its licence."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

VENDOR = Path(__file__).resolve().parents[2] / "api" / "pages" / "static" / "vendor"
MANIFEST = json.loads((VENDOR / "VENDORED.json").read_text())


@pytest.mark.parametrize("package", sorted(MANIFEST))
def test_vendored_files_match_the_manifest(package: str) -> None:
    entry = MANIFEST[package]
    folder = VENDOR / package
    assert sorted(p.name for p in folder.iterdir()) == sorted(entry["files"])
    assert "LICENSE" in entry["files"] and entry["licence"] and entry["integrity"]
    for name, digest in entry["files"].items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name


def test_the_pages_load_only_vendored_or_own_assets() -> None:
    templates = Path(__file__).resolve().parents[2] / "api" / "pages" / "templates"
    for template in templates.glob("*.html"):
        text = template.read_text()
        assert "http://" not in text and "https://" not in text, template.name
