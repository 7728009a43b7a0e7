"""api/presenters.py: what a student may read of a result document."""

from __future__ import annotations

from api.presenters import without_seed


def test_a_student_reads_the_gpu_but_not_the_seed_nor_the_grading_host() -> None:
    document = {
        "verdict": "passed", "seed": 1234,
        "placement": {"host": "gpu-node-17.cluster.internal", "cpus": [8, 9, 10, 11],
                      "gpu": {"name": "NVIDIA H200", "index": 1, "uuid": "GPU-0c5b"}},
    }
    shown = without_seed(document)
    assert "seed" not in shown
    assert shown["placement"] == {"gpu": {"name": "NVIDIA H200", "index": 1, "uuid": "GPU-0c5b"}}
    assert document["placement"]["host"] == "gpu-node-17.cluster.internal"  # the stored one is untouched
    assert without_seed({"verdict": "error", "seed": 1, "placement": None}) == {"verdict": "error", "placement": None}
