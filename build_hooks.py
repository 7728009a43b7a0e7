"""Build hook (pyproject.toml, ``[tool.setuptools] cmdclass``): keep the assignments'
reference solutions out of built distributions.

Students install the client with ``pip install <this repository>``, which builds a wheel:
that wheel must not contain the reference kernel of an assignment they are graded on. Any
module named ``*reference*.py`` under ``grader/assignments/`` (a file of the assignments
package, or a file in an assignment's folder) is left out.

The GPU worker needs the reference (the benchmark times it as a peer), so its image builds
with ``KERNEL_GRADER_BUNDLE_REFERENCE=1`` (docker/worker.Dockerfile); an editable install
(`make`, ``pip install -e``) reads the checkout and always has it.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from setuptools.command.build_py import build_py

#: Module files left out of distributions (paths relative to the project root).
EXCLUDED = ("grader/assignments/*reference*.py", "grader/assignments/*/*reference*.py")
BUNDLE_ENV = "KERNEL_GRADER_BUNDLE_REFERENCE"


def excluded(path: str) -> bool:
    """True for a reference solution's module file."""
    normalized = path.replace(os.sep, "/")
    return any(fnmatch.fnmatch(normalized, pattern) for pattern in EXCLUDED)


def bundling() -> bool:
    """True when the build must keep the reference solutions (the worker image)."""
    return os.environ.get(BUNDLE_ENV) == "1"


class BuildPyWithoutReferences(build_py):
    """setuptools' build_py without the reference solutions (unless BUNDLE_ENV is 1)."""

    def find_package_modules(self, package, package_dir):  # noqa: ANN001, ANN201 - setuptools' API
        modules = super().find_package_modules(package, package_dir)
        if bundling():
            return modules
        return [module for module in modules if not excluded(module[2])]

    def run(self) -> None:
        super().run()
        if bundling():
            return
        # A build folder left by an earlier build that bundled them must not leak them into
        # this one (setuptools copies new files into build/lib but never removes old ones).
        root = Path(self.build_lib)
        for path in root.glob("grader/assignments/**/*reference*"):
            if path.is_file():
                path.unlink()
