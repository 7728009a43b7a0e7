"""The similarity engine: copydetect's fingerprints (winnowing over a token stream in which
every identifier, string and comment is normalised away) compared pairwise, the starter
template's fingerprints subtracted.

Why copydetect (PyPI ``copydetect``; issue 35 named it, Dolos and JPlag): it is Python on
the service's one registry, so the worker that already installs the ``server`` extra needs no
Node.js (Dolos) or JVM and Maven jar (JPlag, not on any registry this project installs from);
its boilerplate option subtracts the template's fingerprints exactly as a course needs; it
returns each pair's matched character ranges in both original texts, which the staff page
marks. Its tokenizer is Pygments' Python lexer: it never imports or runs the text. Dolos'
tree-sitter tokens would also survive renaming; its library needs a Node.js runtime in the
worker image. docs/course.md, "Similarity review", records the comparison and measurements.

Parameters (chosen on the corpus: tests/service/submissions/test_similarity_engine.py):
a k-gram of ``NOISE_CHARS`` normalised characters (copydetect's "noise threshold"; shorter
common runs such as ``V=V.V(V,V=V)`` are ignored), and every k-gram kept (window 1: a class's
files are short, so winnowing buys nothing). Similarity of a side: matched k-gram characters
over its fingerprinted characters; a pair's similarity is the larger side's (a short file
copied whole into a long one is still a copy).

Process: the worker never tokenizes a submission itself. It runs this module as a child
(``python -m submissions.similarity_engine``: a `ReviewJob` as JSON on stdin, a `ReviewResult`
as JSON on stdout) with a wall-clock limit and a memory limit, so that a text that sends the
lexer into a pathological case costs one failed review, never a worker. copydetect imports
matplotlib (for its HTML report, unused here); only the child loads it.
"""

from __future__ import annotations

import io
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Literal

from pydantic import BaseModel, Field

#: k: the length (normalised characters) of the runs compared. 35 keeps a disguised copy of
#: every corpus kernel above 0.65 and independent kernels of one assignment below 0.45.
NOISE_CHARS = 35
#: Guarantee threshold = NOISE_CHARS: window 1, every k-gram is a fingerprint.
WINDOW = 1
#: The default threshold of a run (a pair at or above it is listed).
DEFAULT_THRESHOLD = 0.6
TOOL = "copydetect"

#: What a compared document is: a student's submission, or a known source (staff-added text).
DocumentKind = Literal["submission", "source"]


@dataclass(frozen=True)
class Document:
    """One text to compare. `key` names it to the caller (``("submission", 12)``,
    ``("source", 3)``); `text` is hostile (only tokenized)."""

    key: tuple[DocumentKind, int]
    text: str


@dataclass(frozen=True)
class PairFinding:
    """One pair at or above the threshold. Similarities are in [0, 1]; fragments are
    ``(start, end)`` character offsets into each document's text, sorted, not overlapping."""

    left: tuple[DocumentKind, int]
    right: tuple[DocumentKind, int]
    similarity: float
    left_similarity: float
    right_similarity: float
    matched_chars: int
    left_fragments: list[tuple[int, int]]
    right_fragments: list[tuple[int, int]]


@dataclass
class Review:
    """What a review found, and what it cost."""

    pairs: list[PairFinding]
    pairs_compared: int
    duration_s: float
    tool: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Shares:
    """A fingerprint as sorted arrays, to screen a pair with numpy before copydetect's own
    comparison (which builds Python lists per shared hash: ~ms a pair, minutes for 45k pairs).
    `share(common)` is copydetect's similarity of this side: the characters covered by the
    k-grams whose hash is in `common`, over the characters covered by all its k-grams."""

    unique: Any  # sorted distinct hashes
    position_hashes: Any  # the hash at each fingerprinted position, by position
    positions: Any  # the positions, ascending
    coverage: float  # copydetect's token_coverage
    k: int

    @classmethod
    def of(cls, fp: Any, k: int) -> _Shares:
        import numpy as np

        pairs = sorted((i, h) for h, idx in fp.hash_idx.items() for i in idx)
        positions = np.array([i for i, _ in pairs], dtype=np.int64)
        hashes = np.array([h for _, h in pairs], dtype=np.int64)
        return cls(unique=np.unique(hashes), position_hashes=hashes, positions=positions,
                   coverage=float(fp.token_coverage), k=k)

    def share(self, common: Any) -> float:
        import numpy as np

        starts = self.positions[np.isin(self.position_hashes, common)]
        if not len(starts) or not self.coverage:
            return 0.0
        # Union of [s, s + k) over the sorted starts: what copydetect's slices add up to.
        covered = int(np.minimum(np.diff(starts), self.k).sum()) + self.k
        return covered / self.coverage


def tool_label() -> str:
    """``copydetect 0.5.0``."""
    return f"{TOOL} {metadata.version(TOOL)}"


def _merge(slices: Any, length: int) -> list[tuple[int, int]]:
    """copydetect's (2, n) slice array as sorted, merged, clipped ranges."""
    if len(slices) == 0 or len(slices[0]) == 0:
        return []
    ranges = sorted((max(0, int(s)), min(length, int(e))) for s, e in zip(slices[0], slices[1],
                                                                          strict=True))
    merged: list[tuple[int, int]] = []
    for start, end in ranges:
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def review(students: Sequence[Document], sources: Sequence[Document], *,
           boilerplate: Sequence[str], threshold: float,
           noise_chars: int = NOISE_CHARS) -> Review:
    """Compare every pair of `students` and every student with every one of `sources`
    (sources are not compared with each other); keep the pairs whose similarity is at least
    `threshold`, most similar first. `boilerplate` texts (the starter template) have their
    fingerprints removed from every document first, so text handed out to everyone never
    counts.

    Raises:
        ValueError: `threshold` not in (0, 1].
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    import numpy as np
    from copydetect import CodeFingerprint, compare_files

    started = time.perf_counter()

    def fingerprint(text: str, bp: Any) -> Any:
        # The name only picks the lexer (Python); the text is read from memory.
        return CodeFingerprint("submission.py", noise_chars, WINDOW, boilerplate=bp,
                               fp=io.StringIO(text))

    hashes: list[Any] = []
    for text in boilerplate:
        hashes.extend(fingerprint(text, None).hashes)
    bp = np.unique(np.array(hashes, dtype=np.int64)) if hashes else None
    prints = {doc.key: (doc, fingerprint(doc.text, bp)) for doc in [*students, *sources]}

    candidates = list(itertools.combinations([d.key for d in students], 2))
    candidates += [(s.key, r.key) for s in students for r in sources]
    shares = {key: _Shares.of(fp, noise_chars) for key, (_doc, fp) in prints.items()}
    found: list[PairFinding] = []
    for left_key, right_key in candidates:
        left, right = shares[left_key], shares[right_key]
        if not len(left.unique) or not len(right.unique):
            continue
        common = np.intersect1d(left.unique, right.unique, assume_unique=True)
        if not len(common) or max(left.share(common), right.share(common)) < threshold:
            continue
        left_doc, left_fp = prints[left_key]
        right_doc, right_fp = prints[right_key]
        # copydetect itself for what is kept: its numbers (the same formula as the screen
        # above: test_similarity_engine.py checks they agree) and the fragments in the texts.
        overlap, (left_sim, right_sim), (left_slices, right_slices) = compare_files(left_fp, right_fp)
        # A side's share can pass 1 by a few characters where a matched run touches removed
        # boilerplate; it is a share, so it is clipped.
        left_sim, right_sim = min(1.0, float(left_sim)), min(1.0, float(right_sim))
        similarity = max(left_sim, right_sim)
        if similarity < threshold:
            continue
        found.append(PairFinding(
            left=left_key, right=right_key, similarity=similarity,
            left_similarity=left_sim, right_similarity=right_sim,
            matched_chars=int(overlap),
            left_fragments=_merge(left_slices, len(left_doc.text)),
            right_fragments=_merge(right_slices, len(right_doc.text))))
    found.sort(key=lambda p: (-p.similarity, p.left, p.right))
    return Review(pairs=found, pairs_compared=len(candidates),
                  duration_s=time.perf_counter() - started, tool=tool_label(),
                  parameters={"noise_chars": noise_chars, "window": WINDOW,
                              "threshold": threshold, "boilerplate_files": len(boilerplate)})


# ------------------------------------------------------------------ the child's messages


class DocumentIn(BaseModel):
    """One text of a `ReviewJob`."""

    kind: DocumentKind
    id: int
    text: str


class ReviewJob(BaseModel):
    """What the worker sends the review child (stdin, one JSON document)."""

    students: list[DocumentIn]
    sources: list[DocumentIn]
    boilerplate: list[str]
    threshold: float = Field(gt=0, le=1)
    noise_chars: int = Field(default=NOISE_CHARS, ge=5, le=500)


class PairOut(BaseModel):
    """One `PairFinding`, as the child reports it."""

    left: tuple[DocumentKind, int]
    right: tuple[DocumentKind, int]
    similarity: float = Field(ge=0, le=1)
    left_similarity: float = Field(ge=0, le=1)
    right_similarity: float = Field(ge=0, le=1)
    matched_chars: int = Field(ge=0)
    left_fragments: list[tuple[int, int]]
    right_fragments: list[tuple[int, int]]


class ReviewResult(BaseModel):
    """What the review child answers (stdout, one JSON document)."""

    pairs: list[PairOut]
    pairs_compared: int
    duration_s: float
    tool: str
    parameters: dict[str, Any]


def run_job(job: ReviewJob) -> ReviewResult:
    """`review` over a job's documents, as a `ReviewResult`."""
    def docs(items: list[DocumentIn]) -> list[Document]:
        return [Document((d.kind, d.id), d.text) for d in items]

    result = review(docs(job.students), docs(job.sources), boilerplate=job.boilerplate,
                    threshold=job.threshold, noise_chars=job.noise_chars)
    return ReviewResult(
        pairs=[PairOut(left=p.left, right=p.right, similarity=p.similarity,
                       left_similarity=p.left_similarity, right_similarity=p.right_similarity,
                       matched_chars=p.matched_chars, left_fragments=p.left_fragments,
                       right_fragments=p.right_fragments) for p in result.pairs],
        pairs_compared=result.pairs_compared, duration_s=result.duration_s, tool=result.tool,
        parameters=result.parameters)


def main() -> int:
    """The review child: a `ReviewJob` on stdin, its `ReviewResult` on stdout."""
    import sys

    job = ReviewJob.model_validate_json(sys.stdin.buffer.read())
    sys.stdout.write(run_job(job).model_dump_json())
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
