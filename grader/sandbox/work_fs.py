"""The grading folder's own size-capped filesystem.

Everything a grading writes (the check children's work folders, their Triton cache, the
replay process's folder, the inputs) lies under ``GRADER_WORK_ROOT``. ``grader check`` mounts
a tmpfs of ``GraderSettings.work_fs_bytes`` there, in a mount namespace of its own
(bubblewrap: ``--size N --tmpfs ROOT``, the rest of the host bound as it is), and runs the
grading inside it (``exec_in_work_fs``). So:

- a child that writes without end fills its grading's tmpfs, not the host's disk: its writes
  fail with ENOSPC at the cap, and ``work_folder_full`` names that as the submission's
  ``resource_limit`` error;
- nothing of a grading outlives the grader: the tmpfs belongs to the namespace, which ends
  with its last process, SIGKILL of the grader included (the sandboxed children die with it,
  ``--die-with-parent``). On the host only the empty mount point stays, which the worker
  made inside its own private folder and removes after every grading
  (submissions/grading.py).

A tmpfs lives in memory: a grading can hold up to ``work_fs_bytes`` of RAM (plus its child's
private /tmp, ``tmpfs_bytes``) until it ends.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.report.document import ErrorKind, GradingError
from grader.settings import GraderSettings

#: Set (to the mount point) in the environment of a grader running on its own tmpfs.
MOUNTED_ENV = "GRADER_WORK_FS_MOUNTED"
#: Free space below which a grading folder counts as filled (bytes): an honest grading never
#: comes near its cap, a child that writes until ENOSPC leaves less than a page.
FULL_BELOW_BYTES = 1 << 20


class WorkFsUnavailable(RuntimeError):
    """The size-capped grading filesystem was asked for but cannot be made here."""


def default_mount_point() -> Path:
    """``<temp dir>/grader-work-<uid>``: an empty folder of this user's on the host, over which
    each grader mounts its own tmpfs (mount namespaces are private, so graders running at once
    never see each other's).

    Raises:
        WorkFsUnavailable: the path exists but is not this user's own folder (a link, or
            another user's).
    """
    path = Path(tempfile.gettempdir()) / f"grader-work-{os.geteuid()}"
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = path.lstat()
    if not path.is_dir() or path.is_symlink() or info.st_uid != os.geteuid():
        raise WorkFsUnavailable(f"{path} is not a folder of this user's; remove it, or set GRADER_WORK_ROOT")
    return path


def work_fs_command(command: list[str], *, mount_point: Path, size_bytes: int, bwrap: str) -> list[str]:
    """``command`` run by bubblewrap (``bwrap``: its path, the one grader/sandbox/bwrap.py resolved for
    the sandbox) with a tmpfs of ``size_bytes`` at ``mount_point`` and the host's root bound as
    it is; ``GRADER_WORK_ROOT`` and ``MOUNTED_ENV`` point at the tmpfs.

    Not run as root, bubblewrap needs a user namespace for its mount namespace; the user is
    mapped to itself, so files keep their owners and the sandboxed children (bubblewrap again,
    nested) work as before.
    """
    prefix = [bwrap]
    if os.geteuid() != 0:
        prefix.append("--unshare-user")
    return [*prefix, "--dev-bind", "/", "/", "--size", str(size_bytes), "--perms", "0700",
            "--tmpfs", str(mount_point), "--setenv", "GRADER_WORK_ROOT", str(mount_point),
            "--setenv", MOUNTED_ENV, str(mount_point), "--die-with-parent", "--", *command]


def exec_in_work_fs(settings: GraderSettings, argv: list[str]) -> None:
    """Replace this process by ``python -m grader ARGV`` on its own tmpfs (``work_fs_command``),
    unless that is off (``work_fs_bytes`` 0, or no sandbox) or this process already is on it.
    Returns only when nothing was done.

    Raises:
        WorkFsUnavailable: bubblewrap cannot make the namespace here (the message says how
            to turn the cap off).
    """
    if os.environ.get(MOUNTED_ENV) or settings.work_fs_bytes == 0 or settings.sandbox != "bwrap":
        return
    from grader.sandbox.bwrap import SandboxUnavailable, resolve_bwrap

    try:
        bwrap = str(resolve_bwrap(settings).path)
    except SandboxUnavailable as exc:
        raise WorkFsUnavailable(str(exc)) from exc
    mount_point = Path(settings.work_root) if settings.work_root else default_mount_point()
    command = work_fs_command([sys.executable, "-m", "grader", *argv], mount_point=mount_point,
                              size_bytes=settings.work_fs_bytes, bwrap=bwrap)
    probe = work_fs_command([sys.executable, "-S", "-c", ""], mount_point=mount_point, size_bytes=1 << 20, bwrap=bwrap)
    try:
        result = subprocess.run(probe, capture_output=True, timeout=30, check=False)  # noqa: S603 - argv list
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WorkFsUnavailable(f"bubblewrap could not mount the grading folder's tmpfs: {exc}") from exc
    if result.returncode != 0:
        raise WorkFsUnavailable(
            "bubblewrap could not mount the grading folder's tmpfs at "
            f"{mount_point}: {result.stderr.decode(errors='replace').strip()[:500]} "
            "(GRADER_WORK_FS_BYTES=0 grades on the host's disk, without the cap)")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


def work_folder_full(grading_dir: Path, settings: GraderSettings, exc: OSError | None = None) -> GradingError | None:
    """The submission's error when its grading's own tmpfs is full (its writes reached the
    cap), else None. With ``exc`` (a write of the parent's that failed), only when that failure
    was for want of space. Never for a grading folder on the host's disk: a full host disk is
    not the submission's doing as far as the grader can tell.
    """
    if not os.environ.get(MOUNTED_ENV):
        return None
    if exc is not None and exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    try:
        info = os.statvfs(grading_dir)
    except OSError:
        return None
    if info.f_bavail * info.f_frsize >= FULL_BELOW_BYTES:
        return None
    return GradingError(
        kind=ErrorKind.RESOURCE_LIMIT,
        message=(f"filled the grading folder (its work folder and Triton cache) to its cap of "
                 f"{settings.work_fs_bytes / 2**20:.0f} MiB (GRADER_WORK_FS_BYTES)"),
    )
