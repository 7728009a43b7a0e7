"""The similarity engine (submissions/similarity_engine.py, copydetect) on the real corpus:
a disguised copy of a correct kernel (every identifier renamed, statements reordered where
legal, comments gone; scripts/similarity_disguise.py) is flagged against its original at the
default threshold; independently written correct kernels are not; the starter template alone
flags nothing, and the template's text never counts as a match. No database: the engine is a
pure function (the job around it: test_similarity.py)."""

from __future__ import annotations

import ast
import importlib.util
import itertools
from pathlib import Path

import pytest

from grader.manifest import MANIFESTS
from submissions.similarity_engine import DEFAULT_THRESHOLD, Document, review

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "tests" / "corpus"

_spec = importlib.util.spec_from_file_location("similarity_disguise",
                                               REPO / "scripts" / "similarity_disguise.py")
assert _spec is not None and _spec.loader is not None
disguise_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(disguise_module)

#: Pairs of correct kernels written independently (different authors' approaches: atomics
#: vs a column pass, block pointers vs split-K, the tutorial's grouped order vs both).
INDEPENDENT = [
    ("layernorm_backward", "atomics.py", "tutorial_locks.py"),
    ("layernorm_backward", "column_pass.py", "tutorial_locks.py"),
    ("gemm_epilogue", "block_pointers.py", "split_k_two_kernels.py"),
    ("gemm_epilogue", "block_pointers.py", "tutorial_grouped.py"),
    ("gemm_epilogue", "split_k_two_kernels.py", "tutorial_grouped.py"),
    ("softmax_cross_entropy_backward", "online_rowloop.py", "three_pass_lse.py"),
    ("softmax_backward", "library_two_rows_per_program.py", "simple_rowloop.py"),
]


def template(assignment: str) -> str:
    return MANIFESTS[assignment].template_file.read_text(encoding="utf-8")


def correct(assignment: str) -> list[Path]:
    return sorted((CORPUS / assignment / "correct").glob("*.py"))


def run(assignment: str, texts: list[str], *, sources: list[str] = ()) -> list:
    students = [Document(("submission", i + 1), t) for i, t in enumerate(texts)]
    known = [Document(("source", i + 1), t) for i, t in enumerate(sources)]
    return review(students, known, boilerplate=[template(assignment)],
                  threshold=DEFAULT_THRESHOLD).pairs


@pytest.mark.parametrize("path", [p for a in MANIFESTS for p in correct(a)],
                         ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_a_disguised_copy_is_flagged_against_its_original(path: Path) -> None:
    assignment = path.parent.parent.name
    original = path.read_text(encoding="utf-8")
    copy = disguise_module.disguise(original, keep=[MANIFESTS[assignment].function], seed=7)
    # The copy really is disguised: no identifier of the original's own survives but the
    # entry point (and Python's own dunder names such as __all__), and it still parses.
    ast.parse(copy)
    renamed = {n.id for n in ast.walk(ast.parse(original)) if isinstance(n, ast.Name)
               and isinstance(n.ctx, ast.Store) and not (n.id.startswith("__") and n.id.endswith("__"))}
    kept = {n.id for n in ast.walk(ast.parse(copy)) if isinstance(n, ast.Name)}
    assert renamed & kept <= {MANIFESTS[assignment].function}
    assert copy != original
    pairs = run(assignment, [original, copy])
    assert len(pairs) == 1, f"{path.name}: its disguised copy was not flagged"
    assert pairs[0].similarity >= DEFAULT_THRESHOLD
    assert pairs[0].left_fragments and pairs[0].right_fragments


@pytest.mark.parametrize(("assignment", "first", "second"), INDEPENDENT)
def test_independent_correct_kernels_are_not_flagged(assignment: str, first: str,
                                                     second: str) -> None:
    texts = [(CORPUS / assignment / "correct" / name).read_text(encoding="utf-8")
             for name in (first, second)]
    assert run(assignment, texts) == []


@pytest.mark.parametrize("assignment", sorted(MANIFESTS))
def test_the_starter_template_alone_flags_nothing(assignment: str) -> None:
    # Five students hand in the template untouched: nothing is theirs, nothing is flagged.
    assert run(assignment, [template(assignment)] * 5) == []


def test_without_the_template_subtracted_template_copies_would_be_flagged() -> None:
    # The guard of the test above: the same five files do match when nothing is subtracted.
    text = template("softmax_backward")
    students = [Document(("submission", i), text) for i in range(1, 4)]
    pairs = review(students, [], boilerplate=[], threshold=DEFAULT_THRESHOLD).pairs
    assert len(pairs) == 3 and all(p.similarity > 0.9 for p in pairs)


def test_a_copy_of_a_known_source_is_flagged_against_the_source() -> None:
    reference = (REPO / "grader" / "assignments" / "gemm_epilogue" / "reference.py").read_text()
    copy = disguise_module.disguise(reference, keep=["gemm_epilogue"], seed=3)
    own = (CORPUS / "gemm_epilogue" / "correct" / "split_k_two_kernels.py").read_text()
    pairs = run("gemm_epilogue", [copy, own], sources=[reference])
    assert [(p.left, p.right) for p in pairs] == [(("submission", 1), ("source", 1))]


def test_fragments_mark_the_matched_text_of_both_sides() -> None:
    path = CORPUS / "softmax_backward" / "correct" / "tiles_2d.py"
    text = path.read_text(encoding="utf-8")
    (pair,) = run("softmax_backward", [text, "# mine\n" + text])
    for fragments, side in ((pair.left_fragments, text), (pair.right_fragments, "# mine\n" + text)):
        assert all(0 <= s < e <= len(side) for s, e in fragments)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(fragments))
    # The kernel body is marked.
    marked = "".join(text[s:e] for s, e in pair.left_fragments)
    assert "tl.load" in marked


def test_the_numpy_screen_computes_copydetects_own_similarity() -> None:
    # review() skips a pair when the screen says it is below the threshold, so the screen
    # must be copydetect's number itself, on every pair of corpus files and disguised copies.
    import io

    import numpy as np
    from copydetect import CodeFingerprint, compare_files

    from submissions.similarity_engine import NOISE_CHARS, WINDOW, _Shares

    for assignment in sorted(MANIFESTS):
        bp = np.unique(np.array(list(CodeFingerprint(
            "t.py", NOISE_CHARS, WINDOW, fp=io.StringIO(template(assignment))).hashes)))
        texts = [p.read_text(encoding="utf-8") for p in correct(assignment)]
        texts += [disguise_module.disguise(t, keep=[MANIFESTS[assignment].function], seed=1)
                  for t in texts[:2]]
        prints = [CodeFingerprint("x.py", NOISE_CHARS, WINDOW, boilerplate=bp, fp=io.StringIO(t))
                  for t in texts]
        for a, b in itertools.combinations(prints, 2):
            sa, sb = _Shares.of(a, NOISE_CHARS), _Shares.of(b, NOISE_CHARS)
            common = np.intersect1d(sa.unique, sb.unique, assume_unique=True)
            _overlap, (sim_a, sim_b), _slices = compare_files(a, b)
            assert sa.share(common) == pytest.approx(float(sim_a), abs=1e-12)
            assert sb.share(common) == pytest.approx(float(sim_b), abs=1e-12)


def test_the_api_process_never_imports_copydetect() -> None:
    # copydetect brings matplotlib; only the worker running a review loads it.
    import subprocess
    import sys

    code = ("import sys, api.main, submissions.worker, submissions.similarity\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'copydetect', 'matplotlib'})\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=REPO)
