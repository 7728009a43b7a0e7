#!/usr/bin/env python3
"""Vendor the web pages' front-end assets from the npm registry into api/pages/static/vendor.

The pages have no front-end build step: the few files they load (htmx for live status, Swagger
UI and Redoc for /docs and /redoc) are copied, as published, from pinned npm packages into the
Python package, so a server on an offline lab network serves them itself (no CDN). Each
package is fetched with ``npm pack`` (the ordinary client), its tarball checked against the
registry's ``dist.integrity``, and the chosen files and the licence copied out.
``api/pages/static/vendor/VENDORED.json`` records name, version, licence, integrity and the
sha256 of every copied file; tests/pages/test_assets.py checks the files against it.

Usage: python scripts/vendor_assets.py   (needs npm; rewrites the vendor folder)
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "api" / "pages" / "static" / "vendor"

#: name -> (version, files inside the package to copy, licence id)
PACKAGES: dict[str, tuple[str, list[str], str]] = {
    "htmx.org": ("2.0.11", ["dist/htmx.min.js", "LICENSE"], "0BSD"),
    "swagger-ui-dist": ("5.35.0", ["swagger-ui-bundle.js", "swagger-ui.css",
                                   "favicon-32x32.png", "LICENSE", "NOTICE"], "Apache-2.0"),
    "redoc": ("2.5.4", ["bundles/redoc.standalone.js", "bundles/redoc.standalone.js.LICENSE.txt",
                        "LICENSE"], "MIT"),
}


def _npm(*args: str, cwd: Path) -> str:
    return subprocess.run(["npm", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def vendor(name: str, version: str, files: list[str], licence: str, workdir: Path) -> dict:
    packed = json.loads(_npm("pack", f"{name}@{version}", "--json", "--ignore-scripts",
                             cwd=workdir))[0]
    tarball = workdir / packed["filename"]
    algorithm, expected = packed["integrity"].split("-", 1)
    digest = base64.b64encode(hashlib.new(algorithm, tarball.read_bytes()).digest()).decode()
    if digest != expected:
        raise SystemExit(f"{name}@{version}: tarball does not match its integrity {algorithm}")
    target = VENDOR / name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    copied = {}
    with tarfile.open(tarball) as archive:
        for member_path in files:
            member = archive.getmember(f"package/{member_path}")
            data = archive.extractfile(member).read()  # type: ignore[union-attr]
            out = target / Path(member_path).name
            out.write_bytes(data)
            copied[out.name] = hashlib.sha256(data).hexdigest()
    return {"version": version, "licence": licence, "integrity": packed["integrity"],
            "files": copied}


def main() -> int:
    VENDOR.mkdir(parents=True, exist_ok=True)
    manifest = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (version, files, licence) in PACKAGES.items():
            manifest[name] = vendor(name, version, files, licence, Path(tmp))
            print(f"{name}@{version}: {', '.join(manifest[name]['files'])}")
    (VENDOR / "VENDORED.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
