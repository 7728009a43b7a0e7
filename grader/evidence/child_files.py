"""The one reader of files a sandboxed child leaves behind: every one is hostile input.

The parent decides verdicts outside the sandbox, as the worker's user (root on development
machines), while the child could have replaced any file it was to write: by a symbolic link
to a host path (``/dev/ptmx`` blocks a reader forever, ``/dev/zero`` never ends, a host file
is parsed and may be echoed, ``exists()`` on a link answers for the host), by a FIFO (an open
for reading blocks), by a folder, or by a file far larger than the grader ever writes. So
every read goes through ``ChildFolder``:

- the folder's path is walked from its root, which the parent made, one component at a time
  relative to the previous folder's descriptor (``os.open(..., dir_fd=...)``), each opened
  with ``O_NOFOLLOW | O_DIRECTORY``: no component may be a link;
- the file is opened with ``O_NOFOLLOW | O_NONBLOCK | O_NOCTTY``, so neither a link nor a FIFO
  nor a terminal can make the open follow, block or take the terminal;
- ``fstat`` on that descriptor must show a regular file owned by the sandbox's user (the
  parent's effective uid: bubblewrap maps the child's uid 65534 to it) on the root's own
  filesystem (no hard link to a file of another mount), no larger than its kind's cap;
- it is read up to the cap and no further.

Anything else raises ``ChildFileRejected``, whose message names the file by the parent's own
name for it and says what it was instead, never a byte of it. The caller turns it into the
submission's ``error`` (``ErrorKind.TAMPERED``), charged to the submission. A missing file is
no violation: it reads as ``None``, as a report the child never wrote.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from grader.harness.protocol import MAX_CUBIN_BYTES
from grader.report.document import ErrorKind, GradingError

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


@dataclass(frozen=True)
class FileKind:
    """A kind of file the parent reads back, and the most bytes it takes of one.

    Attributes:
        label: what the file is, in words, for messages.
        cap_bytes: the largest such file the grader's own code writes, with room to spare;
            a larger one is refused unread.
    """

    label: str
    cap_bytes: int


#: ``done.json``, ``step_<i>.json``: a few hundred bytes per call; every string the harness
#: writes is cut at 2,000 characters (check_child.py MESSAGE_CAP) and a traceback at 3,000.
REPORT = FileKind("report", 4 << 20)
#: ``step_<i>.safetensors``: each call's output and, where asked, its input bases after the
#: call; the largest (fp32 bases of the CPU and GPU plans, large_offsets' sampled rows) are
#: tens of MiB. Read into memory (never mapped); every step file of one grading together is held
#: to this cap as well (grader/evidence/reader.py read_evidence).
TENSORS = FileKind("tensor file", 4 << 30)
#: ``recording/recording.json``: at most protocol.MAX_KERNELS kernels and
#: MAX_LAUNCHES_PER_CALL launches per call, a few hundred bytes each.
RECORDING = FileKind("recording", 64 << 20)
#: ``recording/kernel_<sha256>.cubin``: the protocol's own bound.
CUBIN = FileKind("compiled kernel", MAX_CUBIN_BYTES)
#: ``replay_result.json`` of the trusted replay process, and the benchmark children's JSON:
#: raw timing samples, at most a few MiB.
RESULT = FileKind("result file", 64 << 20)


class ChildFileRejected(Exception):
    """A file the parent reads back is not the regular file the grader's harness writes.

    Attributes:
        name: the file's path relative to the child's folder, as the parent names it.
        reason: what it was instead, in words (never its content).
    """

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"the submission replaced the grader's result file {name}: {reason}")
        self.name = name
        self.reason = reason

    def grading_error(self) -> GradingError:
        """The submission's error for this violation (never an infrastructure error)."""
        return GradingError(
            kind=ErrorKind.TAMPERED,
            message=(f"{self}. The grader reads back only the regular files its harness writes, so nothing the "
                     "run left could be graded"),
            details={"file": self.name},
        )


def _kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, words in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return words
    return "not a regular file"


class ChildFolder:
    """A folder a sandboxed child wrote into, whose root the parent made.

    Args:
        root: the folder (e.g. the check child's work folder). Its own path is the parent's;
            only what lies below it is the child's.
        owner: the uid every file must belong to; default the parent's effective uid (what
            the sandbox's user 65534 is mapped to, and the child's own uid without a sandbox).

    Raises (every method):
        ChildFileRejected: a path component or the file is a link, a folder, a FIFO, a device,
            another owner's, on another filesystem, or over its kind's cap.
    """

    def __init__(self, root: Path, *, owner: int | None = None) -> None:
        self.root = Path(root)
        self.owner = os.geteuid() if owner is None else owner

    def _open_folder(self, name: str, parts: list[str]) -> tuple[int | None, int]:
        """(descriptor of the folder holding the file, or None when a folder is missing; the
        root's device number)."""
        try:
            fd = os.open(self.root, _DIRECTORY_FLAGS)
        except FileNotFoundError:
            return None, 0
        except OSError as exc:
            raise ChildFileRejected(name, f"its folder cannot be opened ({exc.strerror})") from None
        device = os.fstat(fd).st_dev
        for part in parts:
            try:
                next_fd = os.open(part, _DIRECTORY_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.close(fd)
                return None, device
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ChildFileRejected(name, f"the folder {part} on its path is a symbolic link or not a "
                                                  "folder") from None
                raise ChildFileRejected(name, f"the folder {part} on its path cannot be opened ({exc.strerror})"
                                        ) from None
            os.close(fd)
            fd = next_fd
        return fd, device

    @contextlib.contextmanager
    def open(self, relative: str, kind: FileKind) -> Iterator[tuple[int, os.stat_result] | None]:
        """The checked file: yields (descriptor, its ``fstat``), or None when it does not exist.
        The descriptor is closed on exit.

        Raises:
            ValueError: ``relative`` is absolute or has an empty, ``.`` or ``..`` component.
        """
        *parts, leaf = relative.split("/")
        if any(part in ("", ".", "..") for part in (*parts, leaf)):
            raise ValueError(f"not a path below the folder: {relative!r}")  # the parent's own names only
        folder_fd, device = self._open_folder(relative, parts)
        if folder_fd is None:
            yield None
            return
        try:
            try:
                fd = os.open(leaf, _FILE_FLAGS, dir_fd=folder_fd)
            except FileNotFoundError:
                fd = None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise ChildFileRejected(relative, "it is a symbolic link") from None
                if exc.errno == errno.ENXIO:
                    raise ChildFileRejected(relative, "it is a socket") from None
                raise ChildFileRejected(relative, f"it cannot be opened ({exc.strerror})") from None
        finally:
            os.close(folder_fd)
        if fd is None:
            yield None
            return
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ChildFileRejected(relative, f"it is {_kind_of(info.st_mode)}")
            if info.st_uid != self.owner:
                raise ChildFileRejected(relative, "it belongs to another user")
            if info.st_dev != device:
                raise ChildFileRejected(relative, "it lies on another filesystem (a hard link to a file elsewhere)")
            if info.st_size > kind.cap_bytes:
                raise ChildFileRejected(relative, f"it holds {info.st_size} bytes, over the {kind.cap_bytes} bytes "
                                                  f"a {kind.label} may have")
            yield fd, info
        finally:
            os.close(fd)

    def read(self, relative: str, kind: FileKind) -> bytes | None:
        """The file's bytes (at most ``kind.cap_bytes``), or None when it does not exist."""
        with self.open(relative, kind) as opened:
            return None if opened is None else read_to_cap(opened[0], relative, kind)

    def exists(self, relative: str, kind: FileKind) -> bool:
        """Whether the file is there (a checked regular file; anything else raises)."""
        with self.open(relative, kind) as opened:
            return opened is not None

    def load_tensors(self, relative: str, kind: FileKind = TENSORS, *, max_tensors: int = 4096,
                     max_bytes: int | None = None) -> dict | None:
        """The safetensors file's tensors (CPU), or None when it does not exist.

        The checked descriptor is read into the parent's memory (at most ``kind.cap_bytes``,
        or ``max_bytes`` when smaller), never mapped: a map of a child-made file is read
        lazily, so a sparse file (``ftruncate``) on a nearly full filesystem passed every
        check and then killed the parent with SIGBUS when a page could not be backed. Its
        header is checked before safetensors parses it: at most ``SAFETENSORS_HEADER_CAP``
        bytes of JSON and ``max_tensors`` entries, so parsing stays linear and small.

        Raises:
            ChildFileRejected: the file is not a checked regular file within the caps, or its
                header announces more tensors than ``max_tensors`` (the grader's harness never
                writes that many for one step).
            ValueError: not a valid safetensors file (safetensors' own error; its message
                holds no bytes of the file's tensors).
        """
        from safetensors.torch import load

        cap = kind if max_bytes is None or max_bytes >= kind.cap_bytes else FileKind(kind.label, max(0, max_bytes))
        with self.open(relative, cap) as opened:
            if opened is None:
                return None
            data = read_to_cap(opened[0], relative, cap)
        count = _safetensors_entries(data, relative)
        if count > max_tensors:
            raise ChildFileRejected(relative, f"its header lists {count} tensors, more than the {max_tensors} its "
                                              "step can hold")
        try:
            return load(data)
        except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
            raise ValueError(f"{relative} is not a valid safetensors file") from exc


#: The most header JSON a step's safetensors file may have: about 150 bytes per tensor entry,
#: for far more tensors than any step of the grader's harness writes.
SAFETENSORS_HEADER_CAP = 1 << 20


def _safetensors_entries(data: bytes, relative: str) -> int:
    """How many tensors the safetensors header in `data` lists (its ``__metadata__`` aside).

    Raises:
        ChildFileRejected: the header is longer than ``SAFETENSORS_HEADER_CAP``.
        ValueError: the header is missing, past the end, or not a JSON object.
    """
    import json

    if len(data) < 8:
        raise ValueError(f"{relative} is not a valid safetensors file")
    length = int.from_bytes(data[:8], "little")
    if length > SAFETENSORS_HEADER_CAP:
        raise ChildFileRejected(relative, f"its header holds {length} bytes, over the {SAFETENSORS_HEADER_CAP} a "
                                          "step's tensor file may have")
    if 8 + length > len(data):
        raise ValueError(f"{relative} is not a valid safetensors file")
    try:
        header = json.loads(data[8:8 + length])
    except ValueError:
        raise ValueError(f"{relative} is not a valid safetensors file") from None
    if not isinstance(header, dict):
        raise ValueError(f"{relative} is not a valid safetensors file")
    return len(header) - ("__metadata__" in header)


def read_to_cap(fd: int, relative: str, kind: FileKind) -> bytes:
    """Read an opened, checked file (``ChildFolder.open``) to its end, at most ``kind.cap_bytes``.

    Raises:
        ChildFileRejected: it grew past the cap since it was checked.
    """
    chunks, total = [], 0
    while total <= kind.cap_bytes:  # the size fstat gave is a hint: read to the cap, no further
        chunk = os.read(fd, min(kind.cap_bytes + 1 - total, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > kind.cap_bytes:
        raise ChildFileRejected(relative, f"it grew past the {kind.cap_bytes} bytes a {kind.label} may have")
    return b"".join(chunks)


def create_marker(folder: Path, name: str) -> None:
    """Create the empty file ``folder/name`` for a child to see (e.g. ``quit``), never
    following a link the child left at that name (an existing file of any kind is left
    alone: the marker is there, or the child has made the name unusable itself)."""
    try:
        fd = os.open(folder, _DIRECTORY_FLAGS)
    except OSError:
        return
    try:
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=fd))
    except OSError:
        pass
    finally:
        os.close(fd)
