"""What the generic grader needs of an assignment: its maths, declared as data.

An assignment is a folder ``grader/assignments/<name>/`` exposing one object, ``ASSIGNMENT``,
that satisfies ``Assignment``. Its own code is its maths: the fp64 oracle, the input
generators, the tolerance table of every output, hints and the benchmark's inputs and peers.
The checks are the generic ones (grader/checks/generic.py), each written once and declared by
the assignment as data (``ValueCheck``, ``CentralDifference``, ``Invariant``, ...); a check of
its own is a ``CustomCheck``. docs/authoring.md walks through adding one.

Terms:
    dims: the symbolic sizes of a call (``{"M": 64, "K": 300, "N": 129}``); every tensor input
        and output names its axes by them (A ("M", "K"), B ("K", "N"), bias ("N",)).
    Case: the values of one call's inputs (fp64 for float inputs, int64 for indices), drawn
        by the assignment's ``make_case``; the core rounds float inputs to the call's dtype,
        places them in strided views inside NaN guards, and computes the oracle of the values
        as placed (so half precision is judged from the same rounded inputs).
    OutputOracle: per output, the fp64 expected value, its error scale and the slack the
        allowed arithmetic makes (grader.checks.tolerance.Tolerance.allowed), same shape as the output.

Generic code (grader/*.py, grader/harness, grader/benchmark) reaches an assignment only
through this protocol and the manifest (grader/manifest.py), never by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import torch

from grader.checks.plan import CheckEvidence, Layout, Plan, PlannedCall, PlannedCheck
from grader.checks.tolerance import Tolerance
from grader.manifest import AssignmentManifest

#: A dtype by its name, as in labels and reports (``float32``, ``float16``, ``bfloat16``, ``int64``).
DtypeName = str
#: ``Tolerance`` per dtype name of the call (an output's tolerance table).
ToleranceTable = Mapping[DtypeName, Tolerance]


# ---- the call: inputs and outputs ---------------------------------------------------------
@dataclass(frozen=True)
class TensorInput:
    """A tensor argument of the student's function.

    Attributes:
        name: the argument name (as in the manifest's ``arguments``).
        dims: its axes by symbolic size, e.g. ("M", "K"); () for a 0-d tensor.
        dtype: ``"call"`` (the call's float dtype: float32/float16/bfloat16) or a fixed dtype
            name (``"int64"`` for class indices, ``"float32"`` for saved statistics).
        float_input: a float tensor whose dtype and requires_grad the rejection checks vary.
        strided: the layouts a real caller passes it in (names of grader.checks.plan.LAYOUTS or
            ``grader.checks.plan.Layout``s: a permuted memory order, stepped strides); () for none.
            ``OutputContract`` places it in each one that reorders memory (the k-th such
            layout of every input in its k-th added case), so that an output allocated with
            ``torch.empty_like`` of it is caught on any rank.
    """

    name: str
    dims: tuple[str, ...]
    dtype: str = "call"
    float_input: bool = True
    strided: tuple[str | Layout, ...] = ("transposed", "step")


@dataclass(frozen=True)
class ScalarInput:
    """A Python scalar argument (``ignore_index=-100``); passed as a keyword when the case
    gives it, else its default applies."""

    name: str
    default: int | float | bool | None = None


@dataclass(frozen=True)
class TensorOutput:
    """One output the function returns (a call with several returns them as a tuple, in the
    order the assignment declares them).

    Attributes:
        name: the output's name (``dx``, ``out``, ``dw``): messages, reports, replay files.
        dims: its axes by symbolic size.
        dtype: ``"call"`` (the call's dtype) or a fixed dtype name.
        tolerances: the bound of this output per call dtype, each with its reason.
    """

    name: str
    dims: tuple[str, ...]
    tolerances: ToleranceTable
    dtype: str = "call"


@dataclass(frozen=True)
class OutputOracle:
    """The fp64 oracle of one output: ``expected``, the error ``scale`` the bound follows and
    the ``slack`` of the arithmetic the assignment allows (None: none), each of the output's
    shape (or of the selected elements, in timed verification)."""

    expected: torch.Tensor
    scale: torch.Tensor
    slack: torch.Tensor | None = None


@dataclass
class Case:
    """One call's inputs as the assignment draws them.

    Attributes:
        values: argument name -> fp64 tensor (float inputs), int64 tensor, or a Python scalar;
            every ``TensorInput`` is present, a ``ScalarInput`` only when passed.
        hidden: values behind the inputs that a reference or a loss needs and the call does
            not get (softmax's logits x behind y = softmax(x)).
        expected: output name -> a fixed expected value (a worked example), else the oracle's.
        label: how messages name the call when its spec gives no label (what the draw knows,
            e.g. how many rows it ignored); default: dims, dtype and layouts.
    """

    values: dict[str, torch.Tensor | int | float | bool]
    hidden: dict[str, torch.Tensor] = field(default_factory=dict)
    expected: dict[str, torch.Tensor] | None = None
    label: str = ""


#: ``make_case(generator, dims, exact) -> Case``: seeded inputs of the given sizes; ``exact``
#: asks for values whose products and fp32 sums are exact in half precision (for the
#: half-precision check's tight cases), where the assignment has such a generator.
MakeCase = Callable[[torch.Generator, Mapping[str, int], bool], Case]
#: ``oracle(values) -> {output name: OutputOracle}``: the fp64 formula on the inputs as placed
#: (float inputs already rounded to the call's dtype, given as such).
Oracle = Callable[[Mapping[str, torch.Tensor | int | float | bool]], Mapping[str, OutputOracle]]
#: ``reference(case, placed values) -> {output name: fp64 tensor}``: an independent expected value
#: (fp64 autograd of the forward, e.g.); scale and slack still come from the oracle.
Reference = Callable[[Case, Mapping[str, torch.Tensor | int | float | bool]], Mapping[str, torch.Tensor]]


# ---- the generic checks, as data -----------------------------------------------------------
@dataclass(frozen=True)
class CaseSpec:
    """One call of a generic check: its sizes, its dtype, where its tensors lie, which values.

    Attributes:
        dims: symbolic size -> length.
        dtype: the call's dtype name.
        layouts: input name -> layout, a name of grader.checks.plan.LAYOUTS or a ``Layout`` (default
            ``contiguous``); any rank.
        exact: draw the assignment's exact values (``MakeCase``'s ``exact``).
        scalars: scalar arguments passed as keywords (``{"ignore_index": 3}``).
        label: how messages name the case (default: the drawn case's label, else dims,
            dtype and layouts).
        key: the call's id within its check (``<check>/<key>``; default: its index).
        draw: ``draw(generator) -> Case``: this case's values, drawn the assignment's own way
            (a worked example, rows with ignored targets, logits at +-1e4); default
            ``make_case(generator, dims, exact)``.
        dtypes: input name -> a dtype name that overrides the input's own for this case (a
            rejection's float targets, say).
    """

    dims: Mapping[str, int]
    dtype: DtypeName = "float32"
    layouts: Mapping[str, str | Layout] = field(default_factory=dict)
    exact: bool = False
    scalars: Mapping[str, int | float | bool] = field(default_factory=dict)
    label: str = ""
    key: str = ""
    draw: Callable[[torch.Generator], Case] | None = None
    dtypes: Mapping[str, DtypeName] = field(default_factory=dict)


@dataclass(frozen=True)
class ValueCheck:
    """Every output of every case within its tolerance of the oracle (or of ``reference``).

    The generic form of ``autograd_*``, ``half_precision``, ``strided_inputs``, ``edge_shapes``
    and worked examples: they differ only in their cases. Every call records its Triton
    launches for ``triton_kernel`` (replayed on new values of the same layout).
    """

    name: str
    cases: tuple[CaseSpec, ...]
    reference: Reference | None = None
    example: Callable[[], Case] | None = None


@dataclass(frozen=True)
class CentralDifference:
    """``output`` at ``points`` random positions against the central difference
    (L(v + h e) - L(v - h e)) / 2h in fp64 of the assignment's ``loss`` over ``variable`` (a
    value or hidden entry of the case), under the tolerance rule of ``output`` (its rtol, its
    vtol and the slack of the allowed arithmetic at the point: a half-precision output's
    rounding) with ``atol`` as its floor (the finite difference's own error; h=1e-5 gives
    ~2e-11 for O(1) losses).

    ``at_placed``: perturb the input as placed (rounded to the call's dtype) instead of the
    drawn fp64 value, so the slope is taken where the kernel computed. ``chosen(case) ->
    indices``: positions always tested (a target logit, an ignored row), before the random
    ones that make up ``points``."""

    name: str
    cases: tuple[CaseSpec, ...]
    output: str
    variable: str
    loss: Callable[[Case, torch.Tensor], torch.Tensor]
    points: int = 4
    h: float = 1e-5
    atol: float = 1e-9
    at_placed: bool = False
    chosen: Callable[[Case], list[tuple[int, ...]]] | None = None


@dataclass(frozen=True)
class Invariant:
    """sum over ``dim`` (any axis or axes of any rank: attention's key axis -2) of output *
    weights matches the same sum of the oracle (0 for sum_j dx = 0), within the sum of the
    per-element bounds times |weights|. The hint follows ``hint_requires`` (hint_for).

    ``weights(case, placed values) -> tensor`` broadcastable to the output, or None for 1
    (layernorm's sum_j dx * xhat = 0 uses xhat). ``where(placed values, index) -> words``
    names a failing index of the reduced output (``row 3 (ignored) of dx``); default ``<output>
    at <index> along the reduced axis``."""

    name: str
    cases: tuple[CaseSpec, ...]
    output: str
    weights: Callable[[Case, Mapping], torch.Tensor] | None = None
    dim: int | tuple[int, ...] = -1
    what: str = "sums to ~0"
    where: Callable[[Mapping, int], str] | None = None


@dataclass(frozen=True)
class Bounds:
    """A property of values: every element of ``output`` lies within ``[low, high]`` of the
    assignment's ``bounds(case, placed values) -> (low, high)`` (tensors broadcastable to the
    output; None for no bound on that side), give or take the element's own tolerance
    (``Tolerance.allowed`` of the oracle). Any rank, any axis: attention's convex hull is
    ``low = min over the keys j <= i of v[..., j, :]`` and ``high`` the max.

    ``what`` says the property in words (``lies within the min and max of the rows of v it
    attends to``); ``where(placed, index) -> words`` names a failing element (default: the
    output and its index). The hint follows ``hint_requires`` like every value check's."""

    name: str
    cases: tuple[CaseSpec, ...]
    output: str
    bounds: Callable[[Case, Mapping], tuple[torch.Tensor | None, torch.Tensor | None]]
    what: str = "lies within its bounds"
    where: Callable[[Mapping, tuple[int, ...]], str] | None = None


@dataclass(frozen=True)
class OutputContract:
    """Each output is a fresh contiguous tensor of the declared shape, dtype and device that
    shares no memory with the inputs, and every input (and the guards around it) is bitwise
    unchanged. The core adds, to the cases given, per call dtype one case for each memory
    order the inputs declare in ``TensorInput.strided`` (the default: every input of 2 dims
    or more with its last two axes swapped; attention's q, k, v as (B, S, H, D) storage),
    so that ``torch.empty_like`` of such an input is caught on any rank. Its calls are not
    replayed by ``triton_kernel`` (it judges no values)."""

    name: str
    cases: tuple[CaseSpec, ...]


@dataclass(frozen=True)
class RejectsMismatch:
    """Calls that must raise: for every tensor input in turn, each axis it shares with another
    input one longer (a shape that disagrees with the others), its last two axes swapped (a
    (B, H, D, S) k where (B, H, S, D) is due; where both are shared and differ in length), each
    pair in ``swaps`` swapped likewise (axis names, any two of the input's), a float input in
    another float dtype, and one input on another device (``dims`` gives the sizes; ``dtype``
    the call dtype of the other inputs, one the assignment accepts, so that only the one
    mismatch can make a call raise)."""

    name: str
    dims: Mapping[str, int]
    dtype: DtypeName = "float32"
    swaps: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RejectsRequiresGrad:
    """Calls that must raise: each float input with requires_grad=True in turn (in call dtype
    ``dtype``, one the assignment accepts)."""

    name: str
    dims: Mapping[str, int]
    dtype: DtypeName = "float32"


@dataclass(frozen=True)
class Rejects:
    """Calls that must raise, built by the assignment: ``cases`` are (label, case spec,
    ``edit(values) -> values``) triples (out-of-range targets, a target vector of the wrong
    length, say; the spec's ``dtypes`` gives an input another dtype), then, for each input
    named in ``other_device``, one call on the first case's values with that input on another
    device."""

    name: str
    cases: tuple[tuple[str, CaseSpec, Callable[[dict], dict]], ...]
    other_device: tuple[str, ...] = ()


@dataclass(frozen=True)
class FreshResults:
    """The same buffers refilled in place ``refills`` times: every round must match its own
    oracle (an output cached by address or call count is stale)."""

    name: str
    case: CaseSpec
    refills: int = 2


@dataclass(frozen=True)
class TrainingProblem:
    """A small model and data set trained with the submission's outputs as one layer's backward
    (what leaderboards call application validation: a kernel that passes unit checks but
    diverges in real use). Every function runs in the parent, in fp64; ``params`` are the
    model's parameters by name.

    Attributes:
        steps: how many SGD steps.
        dtype: the call dtype of the submission's calls.
        label: the model and data in words (``two-layer ReLU classifier on 300 spiral points``).
        init: ``init(generator) -> params``: the initial parameters (and data, kept in the
            closure), from the plan's generator.
        inputs: ``inputs(params) -> Case``: the submission's call at these parameters (the
            logits of the batch and its targets, say).
        loss: ``loss(params) -> float``: the training loss at these parameters.
        step: ``step(params, case, outputs) -> params``: one SGD step in which ``outputs`` (output
            name -> fp64 tensor: the submission's, or the oracle's) are the backward of the
            layer the submission implements, propagated by fp64 autograd through the rest of
            the model (``tensor.backward(outputs[...])``); ``case`` is the call that gave them.
    """

    steps: int
    dtype: DtypeName
    label: str
    init: Callable[[torch.Generator], dict[str, torch.Tensor]]
    inputs: Callable[[Mapping[str, torch.Tensor]], Case]
    loss: Callable[[Mapping[str, torch.Tensor]], float]
    step: Callable[[Mapping[str, torch.Tensor], Case, Mapping[str, torch.Tensor]], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class TrainingStep:
    """The submission inside a training step: ``problem()`` (a ``TrainingProblem``) is trained
    for its steps beside the fp64 reference; the check fails, naming the step and both losses,
    when a value goes non-finite or the losses part by more than ``margin`` times the most that
    trajectories whose every output element sits at the edge of its tolerance (one way, then the
    other) part from the reference at that step.

    The submission never runs the loop (nothing its process computes decides a verdict): its
    calls are the reference trajectory's (teacher forcing), planned ahead, and the parent steps
    the model with the outputs read back, so the trajectory follows the submission's gradients
    while it stays near the reference (where the comparison means something)."""

    name: str
    problem: Callable[[], TrainingProblem]
    margin: float = 2.0


@dataclass(frozen=True)
class TritonKernel:
    """The recorded launches of every right output, replayed alone on new inputs of the same
    layout, reproduce the oracle's output (an aggregate check, no calls of its own)."""

    name: str = "triton_kernel"


@dataclass(frozen=True)
class CustomCheck:
    """A check of the assignment's own: ``build(plan, declared) -> PlannedCheck``, called with
    the plan being built (its generator, bank and device) and the assignment's ``Declared``
    (large_offsets, say). Use it only for what no generic check says; docs/authoring.md,
    "A check of your own", is the recipe (grader.checks.generic.PlanBuilder places inputs and
    computes oracles for it)."""

    name: str
    build: Callable[[Plan, object], PlannedCheck]


CheckDecl = (ValueCheck | CentralDifference | Invariant | Bounds | OutputContract | RejectsMismatch | RejectsRequiresGrad
             | Rejects | FreshResults | TrainingStep | TritonKernel | CustomCheck)
#: ``diagnose(out, call, evidence) -> sentence or ""``: names a known mistake an output matches.
Diagnose = Callable[[torch.Tensor, PlannedCall, CheckEvidence], str]


# ---- the benchmark ------------------------------------------------------------------------
@dataclass(frozen=True)
class Floor:
    """The least time a row can take on the GPU it runs on (a time under it is not physical).

    Attributes:
        kind: ``bandwidth`` (bytes / measured copy bandwidth), ``compute`` (FLOPs / measured
            tensor-core throughput of the row's dtype) or ``roofline`` (the larger of both).
        bytes: ``bytes(shape, dtype) -> {"min": bytes, "two_pass": bytes}``: what a kernel must
            move through device memory at least (one pass) and when it reads its inputs twice;
            needed for bandwidth and roofline.
        flops: ``flops(shape, dtype) -> floating-point operations`` of one call (2MNK for a
            matrix product); needed for compute and roofline.
    """

    kind: Literal["bandwidth", "compute", "roofline"]
    bytes: Callable[[tuple[int, ...], str], dict[str, int]] | None = None
    flops: Callable[[tuple[int, ...], str], int] | None = None

    def __post_init__(self) -> None:
        if self.kind in ("bandwidth", "roofline") and self.bytes is None:
            raise ValueError(f"a {self.kind} floor needs bytes(shape, dtype)")
        if self.kind in ("compute", "roofline") and self.flops is None:
            raise ValueError(f"a {self.kind} floor needs flops(shape, dtype)")


@dataclass(frozen=True)
class TimedSelection:
    """Which elements of every timed call are verified, per output and input (drawn after the
    call, grader.harness.protocol.TimedVerification).

    Attributes:
        draws: symbolic size -> indices drawn per timed call (``{"M": 2}``).
        outputs: output name -> per axis the drawn size that selects it, or None for every
            index (a GEMM's out: ("M", None); layernorm's dw: (None,), all of it).
        inputs: per positional argument, its axes the same way (None: a scalar, or not
            compared); the selected input elements must be unchanged by the call. A GEMM's A
            ("M", None), B (None, None).
    """

    draws: Mapping[str, int]
    outputs: Mapping[str, tuple[str | None, ...]]
    inputs: tuple[tuple[str | None, ...] | None, ...]


@dataclass(frozen=True)
class BenchmarkSpec:
    """How an assignment is timed on a GPU.

    Attributes:
        shapes: the shapes of the benchmark rows (each timed in every dtype), as bench.py's
            ``make_inputs(shape, dtype, seed, device)`` reads them ((M, N); (M, N, K)).
        dtypes: dtype names (``float32``, ``float16``, ``bfloat16``).
        baseline: the peer the headline ratio is taken against (a key of ``scopes``).
        peers: every peer timed beside the student, in table order (names in bench.py's PEERS,
            its COMPILED_PEER, and ``reference`` for the course reference kernel).
        scopes: what each timed name includes (shown under every figure), ``student`` too.
        floor: the row's floor (``Floor``: bandwidth, compute or roofline).
        selection: what the timed verification compares (``TimedSelection``).
        bench_file: the assignment's bench.py (bound into the timing children).
        oracle_file: the assignment's oracle.py (torch-only; bound into the replay timer, which
            calls its ``benchmark_oracle(inputs, index)`` to verify every timed output).
        oracle: the same ``benchmark_oracle`` for the parent: ``(inputs, index) -> {output:
            OutputOracle-like (expected, scale, slack) tuple}`` on the elements ``selection``
            picks with ``index`` (size name -> LongTensor), every element when None.
    """

    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    baseline: str
    peers: tuple[str, ...]
    scopes: dict[str, str]
    floor: Floor
    selection: TimedSelection
    bench_file: Path
    oracle_file: Path
    oracle: Callable[[tuple, Mapping[str, torch.Tensor] | None], Mapping[str, tuple]]


# ---- the corpus ---------------------------------------------------------------------------
@dataclass(frozen=True)
class CorpusMinimums:
    """How many files an assignment's corpus (tests/corpus/NAME/) holds at least:
    ``correct`` styles a student would write and ``wrong`` known mistakes, one per file
    (tests/grader/test_corpora.py; docs/authoring.md states the default, 3 and 8). An
    assignment sets ``corpus = CorpusMinimums(...)`` where its own issue asks otherwise."""

    correct: int = 3
    wrong: int = 8


def corpus_minimums(assignment: object) -> CorpusMinimums:
    """The assignment's ``corpus`` minimums, else the default (3 correct, 8 wrong)."""
    found = getattr(assignment, "corpus", None)
    return found if isinstance(found, CorpusMinimums) else CorpusMinimums()


# ---- the assignment -------------------------------------------------------------------------
class Assignment(Protocol):
    """One assignment, as the grader sees it.

    Attributes:
        manifest: the torch-free registry entry (name, function, arguments, file name).
        inputs / outputs: the call (``TensorInput``/``ScalarInput``; ``TensorOutput`` with its
            tolerance table), in argument and return order.
        check_names: the checks in the order they run and are shown.
        gpu_only_checks: those of ``check_names`` the CPU interpreter cannot run (reported
            "not run: GPU only" there).
        benchmark: how it is timed (BenchmarkSpec).
        reference_file: the course reference solution (a peer in the benchmark).
        template_file: the starter file.
        crash_hint: a sentence added to the error of a call that crashed the process.
        corpus: optional; the corpus's minimums (``CorpusMinimums``; default 3 correct, 8
            wrong), read by tests/grader/test_corpora.py through ``corpus_minimums``.
    """

    manifest: AssignmentManifest
    inputs: tuple[TensorInput | ScalarInput, ...]
    outputs: tuple[TensorOutput, ...]
    check_names: tuple[str, ...]
    gpu_only_checks: tuple[str, ...]
    benchmark: BenchmarkSpec
    reference_file: Path
    template_file: Path
    crash_hint: str

    def build_plan(self, *, seed: int, device: str) -> Plan:
        """Every check's inputs and oracles for one run (``seed`` seeds all inputs; ``device``
        ``cpu`` or ``cuda``)."""
        ...

    def tolerance(self, dtype: torch.dtype, output: str | None = None) -> Tolerance:
        """The tolerance of ``output`` (default: the first) for calls of ``dtype``."""
        ...


@dataclass(frozen=True)
class Declared:
    """An assignment's maths, from which grader/checks/generic.py builds the plan.

    Attributes:
        inputs / outputs: the call.
        make_case: seeded input values (``MakeCase``).
        oracle: the fp64 formula (``Oracle``).
        checks: ``checks(device) -> the check declarations in order`` (the CPU interpreter
            gets fewer rows than a GPU).
        hints: check name -> the hint shown when it fails.
        hint_requires: check name -> simpler checks whose failure makes a pointer there a
            better hint (grader.checks.evaluate.hint_for).
        diagnose: names a known mistake an output matches (a hint, never a verdict).
        replay_case: ``replay_case(generator, case) -> Case``: new values of the same sizes for
            replaying a call's launches (default: ``make_case`` again).
    """

    inputs: tuple[TensorInput | ScalarInput, ...]
    outputs: tuple[TensorOutput, ...]
    make_case: MakeCase
    oracle: Oracle
    checks: Callable[[str], tuple[CheckDecl, ...]]
    hints: Mapping[str, str]
    hint_requires: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    diagnose: Diagnose | None = None
    replay_case: Callable[[torch.Generator, Case], Case] | None = None
