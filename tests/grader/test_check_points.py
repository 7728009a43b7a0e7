"""Each assignment folder's points.toml (the default points per check that the service reads
without torch, submissions/check_points.py) names exactly the assignment's checks, in their
order, and sums to the default 100 correctness points."""

from __future__ import annotations

import pytest

from grader.assignments import get_assignment
from grader.manifest import MANIFESTS
from submissions.check_points import CheckPointsInvalid, default_check_points


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_points_name_every_check_in_order(name: str) -> None:
    points = default_check_points(MANIFESTS[name])
    assert tuple(points) == tuple(get_assignment(name).check_names)
    assert sum(points.values()) == 100
    assert all(value > 0 for value in points.values())


def test_a_malformed_points_file_is_refused(tmp_path, monkeypatch) -> None:
    from dataclasses import replace

    manifest = replace(MANIFESTS["softmax_backward"], package="grader.assignments.nowhere")
    folder = manifest.template_file.parent
    monkeypatch.setattr(type(manifest), "template_file", property(lambda _self: tmp_path / "template.py"))
    (tmp_path / "points.toml").write_text('[checks]\nautograd_fp32 = -1\n')
    with pytest.raises(CheckPointsInvalid, match="autograd_fp32 = -1"):
        default_check_points.__wrapped__(manifest)
    (tmp_path / "points.toml").unlink()
    assert default_check_points.__wrapped__(manifest) == {}  # no file: all or nothing
    assert not folder.exists()
