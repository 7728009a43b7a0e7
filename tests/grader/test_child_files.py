"""grader/evidence/child_files.py: the one reader of what a sandboxed child leaves, against the files a
hostile child can make (links, FIFOs, folders, devices, other owners, oversized files)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from grader.evidence.child_files import REPORT, TENSORS, ChildFileRejected, ChildFolder, FileKind, create_marker
from grader.report.document import ErrorKind


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    work = tmp_path / "check"
    work.mkdir()
    return work


def _rejection(folder: Path, name: str, kind: FileKind = REPORT) -> ChildFileRejected:
    with pytest.raises(ChildFileRejected) as caught:
        ChildFolder(folder).read(name, kind)
    return caught.value


def test_a_regular_file_is_read_and_a_missing_one_is_none(folder: Path):
    (folder / "done.json").write_bytes(b'{"phase": "done"}')
    files = ChildFolder(folder)
    assert files.read("done.json", REPORT) == b'{"phase": "done"}'
    assert files.exists("done.json", REPORT)
    assert files.read("step_0.json", REPORT) is None
    assert not files.exists("step_0.json", REPORT)
    assert files.read("recording/recording.json", REPORT) is None  # a missing folder too


def test_a_link_reads_the_same_whatever_it_points_at(folder: Path, tmp_path: Path):
    """No bit about the host: a link to an existing file, a missing path, a device or a folder
    gives one and the same answer, and nothing of the target is read."""
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST-SECRET-CONTENT")
    messages = set()
    for target in (str(secret), str(tmp_path / "no-such-file"), "/dev/zero", "/dev/ptmx", "/"):
        link = folder / "done.json"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        rejected = _rejection(folder, "done.json")
        assert "HOST-SECRET-CONTENT" not in str(rejected)
        messages.add(str(rejected))
    assert messages == {"the submission replaced the grader's result file done.json: it is a symbolic link"}


def test_a_fifo_is_refused_without_blocking(folder: Path):
    os.mkfifo(folder / "done.json")
    result: list = []
    reader = threading.Thread(target=lambda: result.append(_rejection(folder, "done.json")), daemon=True)
    reader.start()
    reader.join(timeout=5)
    assert not reader.is_alive(), "opening a FIFO blocked the reader"
    assert result[0].reason == "it is a FIFO (named pipe)"


def test_a_folder_is_refused(folder: Path):
    (folder / "done.json").mkdir()
    assert _rejection(folder, "done.json").reason == "it is a folder"


def test_a_linked_folder_on_the_path_is_refused(folder: Path, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "recording.json").write_text("{}")
    (folder / "recording").symlink_to(elsewhere)
    rejected = _rejection(folder, "recording/recording.json")
    assert rejected.name == "recording/recording.json"
    assert "symbolic link or not a folder" in rejected.reason


def test_an_oversized_file_is_refused_unread(folder: Path):
    with open(folder / "done.json", "wb") as handle:
        handle.truncate(REPORT.cap_bytes + 1)  # sparse
    assert _rejection(folder, "done.json").reason.startswith(f"it holds {REPORT.cap_bytes + 1} bytes, over")


def test_a_file_of_another_owner_is_refused(folder: Path):
    (folder / "done.json").write_text("{}")
    assert _rejection_with_owner(folder, os.geteuid() + 1).reason == "it belongs to another user"


def _rejection_with_owner(folder: Path, owner: int) -> ChildFileRejected:
    with pytest.raises(ChildFileRejected) as caught:
        ChildFolder(folder, owner=owner).read("done.json", REPORT)
    return caught.value


def test_the_violation_is_the_submissions_error(folder: Path):
    (folder / "done.json").symlink_to("/etc/passwd")
    error = _rejection(folder, "done.json").grading_error()
    assert error.kind is ErrorKind.TAMPERED
    assert error.message.startswith("the submission replaced the grader's result file done.json")
    assert "root:" not in error.model_dump_json()


def test_tensors_load_from_the_checked_file(folder: Path):
    save_file({"a:out": torch.arange(6.0).reshape(2, 3)}, str(folder / "step_0.safetensors"))
    tensors = ChildFolder(folder).load_tensors("step_0.safetensors")
    assert torch.equal(tensors["a:out"], torch.arange(6.0).reshape(2, 3))
    (folder / "step_1.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        ChildFolder(folder).load_tensors("step_1.safetensors")
    (folder / "step_2.safetensors").symlink_to("/dev/zero")
    with pytest.raises(ChildFileRejected):
        ChildFolder(folder).load_tensors("step_2.safetensors", TENSORS)


def test_a_marker_is_never_created_through_a_link(folder: Path, tmp_path: Path):
    target = tmp_path / "host-file-the-link-names"
    (folder / "quit").symlink_to(target)
    create_marker(folder, "quit")
    assert not target.exists()
    create_marker(folder, "other")
    assert (folder / "other").is_file()


def test_only_paths_below_the_folder_are_read(folder: Path):
    for relative in ("../done.json", "/etc/passwd", "recording//recording.json", "./done.json"):
        with pytest.raises(ValueError, match="not a path below the folder"):
            ChildFolder(folder).read(relative, REPORT)
