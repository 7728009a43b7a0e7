"""The plan of a correctness run and the evidence that comes back, for any assignment.

An assignment's ``checks.py`` builds a ``Plan``: named checks, each a list of ``PlannedCall``s
on inputs from one seeded ``torch.Generator``, with the fp64 oracle of every call computed
here, in the parent. The plan travels to the sandboxed child as ``plan.json`` (a
``protocol.CheckPlan``) plus one ``inputs.safetensors`` of flat base buffers; every tensor
argument is a strided view of a base (``protocol.TensorSpec``), placed inside NaN guard
elements so that a read outside the view shows up as NaN in the output.

After the child ran, the runner collects a ``CallEvidence`` per call round (the validated
report, the output tensor, the bases after the call) and hands a ``CheckEvidence`` to each
check's ``evaluate``. Nothing here imports an assignment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from grader.checks.tolerance import Tolerance
from grader.harness.protocol import (
    ArgSpec,
    CallReport,
    CallSpec,
    CheckPlan,
    ScalarSpec,
    StepSpec,
    TensorSpec,
    TiledSpec,
)
from grader.report.document import CheckOutcome

#: NaN elements before and after every view in its base buffer: an out-of-bounds read shows
#: as NaN in the output (integer bases are guarded with the dtype's most negative value). Every
#: view therefore starts at a non-zero storage offset (``Layout.offset`` adds to it).
GUARD = 67


@dataclass(frozen=True)
class Layout:
    """Where the elements of an N-D view lie in its base, as data (any rank).

    Attributes:
        name: how labels and messages name it (``transposed``, ``permuted(0, 2, 1, 3)``).
        order: the axes from the outermost in memory to the innermost (``(0, 2, 1, 3)``: a
            (B, S, H, D) buffer viewed as (B, H, S, D)); ``None``: row-major; ``"swap_last"``:
            row-major with the last two axes swapped (column-major for 2-D).
        step: the stride of the innermost axis in memory (3: every 3rd element of a wider
            buffer).
        gap: elements left unused after each run of the axis inside it (a pitch wider than
            the data), so no two axes share a stride by arithmetic accident.
        offset: elements between the guard and the view's first element.

    Strides: the innermost axis in memory gets ``step``; each axis further out gets the
    stride of the axis inside it times that axis's length, plus ``gap``.
    """

    name: str
    order: tuple[int, ...] | str | None = None
    step: int = 1
    gap: int = 0
    offset: int = 0

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def permuted(*order: int, step: int = 1, gap: int = 0) -> Layout:
        """The memory order ``order`` (outermost first): ``Layout.permuted(0, 2, 1, 3)``."""
        return Layout(f"permuted{tuple(order)}" + (f" step {step}" if step != 1 else ""), tuple(order), step, gap)

    def axes(self, rank: int) -> tuple[int, ...]:
        """The memory order for a view of ``rank`` dims (outermost first).

        Raises:
            ValueError: an order that is not a permutation of the view's axes.
        """
        if self.order is None or rank == 0:
            return tuple(range(rank))
        if self.order == "swap_last":
            if rank < 2:
                raise ValueError(f"layout {self.name!r} needs 2 dims at least, not a {rank}-D view")
            return (*range(rank - 2), rank - 1, rank - 2)
        if sorted(self.order) != list(range(rank)):
            raise ValueError(f"layout {self.name!r} orders axes {self.order}, not a permutation of a {rank}-D view's")
        return tuple(self.order)

    def strides(self, size: tuple[int, ...]) -> tuple[int, ...]:
        """The view's strides for ``size`` (elements)."""
        strides = [0] * len(size)
        running = self.step
        for axis in reversed(self.axes(len(size))):
            strides[axis] = running
            running = running * size[axis] + self.gap
        return tuple(strides)

    @property
    def reorders(self) -> bool:
        """Its memory order is not row-major (``torch.empty_like`` of it is not contiguous)."""
        return self.order is not None


#: The named layouts (``CaseSpec.layouts`` and ``TensorInput.strided`` take a name or a
#: ``Layout``). For 2-D (rows, cols): contiguous (cols, 1), transposed (1, rows), step
#: (3 cols + 2, 3), transposed_step (2, 2 rows + 1); for N-D the same rules on the last two axes
#: (step: every 3rd element of every axis's run, gaps between runs).
LAYOUTS: dict[str, Layout] = {
    "contiguous": Layout("contiguous"),
    "transposed": Layout("transposed", "swap_last"),
    "step": Layout("step", step=3, gap=2),
    "transposed_step": Layout("transposed_step", "swap_last", step=2, gap=1),
    "offset": Layout("offset", offset=5),  # contiguous, 5 elements further into its base
}


def layout_of(layout: str | Layout) -> Layout:
    """The ``Layout`` of a name (``LAYOUTS``) or a ``Layout`` itself.

    Raises:
        ValueError: an unknown name.
    """
    if isinstance(layout, Layout):
        return layout
    if layout not in LAYOUTS:
        raise ValueError(f"no layout {layout!r} (known: {', '.join(LAYOUTS)}, or a grader.checks.plan.Layout)")
    return LAYOUTS[layout]


class AssignmentError(Exception):
    """Building a plan from an assignment's declarations failed: the author's error (a layout
    that does not fit a rank, a ``make_case`` or oracle that raised), neither the submission's
    nor the machine's. The message names the assignment, the check and the case, and ends
    with the traceback of the exception that caused it (``grader check`` prints it whole)."""

    def __init__(self, assignment: str, check: str, case: str, cause: BaseException) -> None:
        import traceback

        self.assignment, self.check, self.case = assignment, check, case
        trace = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
        super().__init__(f"assignment {assignment or '?'}: check {check!r}, case {case or '(none)'}: "
                         f"{type(cause).__name__}: {cause}\n{trace.rstrip()}")


def dtype_name(dtype: torch.dtype) -> str:
    """``float16`` for torch.float16 (the names used in labels and reports)."""
    return str(dtype).replace("torch.", "")


class InputBank:
    """Flat base buffers sent to the child (one safetensors file) and the views into them."""

    def __init__(self) -> None:
        self.bases: dict[str, torch.Tensor] = {}

    def add(self, flat: torch.Tensor) -> str:
        """Keep ``flat`` (1-D) as a new base; returns its name."""
        name = f"b{len(self.bases)}"
        self.bases[name] = flat.contiguous()
        return name

    def view(self, values: torch.Tensor, dtype: torch.dtype, layout: str | Layout = "contiguous") -> TensorSpec:
        """Place ``values`` (any rank) as a ``dtype`` view with ``layout`` inside guards.

        ``layout`` is a name of ``LAYOUTS`` (contiguous, transposed, step, transposed_step,
        offset) or a ``Layout`` (a permuted memory order, say); 0-D views take any layout as
        contiguous.

        Raises:
            ValueError: an unknown layout, or one that does not fit this number of dimensions.
        """
        found = layout_of(layout)
        size = tuple(values.shape)
        stride = found.strides(size)
        offset = GUARD + (found.offset if values.dim() else 0)
        span = 1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0
        fill = float("nan") if dtype.is_floating_point else torch.iinfo(dtype).min
        flat = torch.full((offset + span + GUARD,), fill, dtype=dtype)
        if span:
            torch.as_strided(flat, size, stride, offset).copy_(values.to(dtype))
        return TensorSpec(base=self.add(flat), size=list(size), stride=list(stride), offset=offset)

    def relayout(self, spec: TensorSpec, values: torch.Tensor) -> TensorSpec:
        """A view with ``spec``'s size, strides and offset in a new base of the same size and
        guards, holding ``values`` (the replay inputs of a recorded call: the recorded pointers
        then land on the same positions)."""
        old = self.bases[spec.base]
        fill = float("nan") if old.dtype.is_floating_point else torch.iinfo(old.dtype).min
        flat = torch.full_like(old, fill)
        if values.numel():
            torch.as_strided(flat, spec.size, spec.stride, spec.offset).copy_(values.to(old.dtype))
        return spec.model_copy(update={"base": self.add(flat)})

    def values_of(self, spec: TensorSpec) -> torch.Tensor:
        """The values of a view as the child sees them (same dtype), as a new tensor."""
        return torch.as_strided(self.bases[spec.base], spec.size, spec.stride, spec.offset).clone()

    def tiled(self, pattern: torch.Tensor, dtype: torch.dtype, rows: int) -> TiledSpec:
        """A (rows, N) contiguous ``dtype`` tensor that the child builds on its device from
        ``pattern`` (P, N): row r holds pattern row r % P, inside GUARD NaN elements.

        Used where the tensor is too large to send (large_offsets: 4.3 GB per tensor); only
        the pattern travels, and the parent's oracle of any row r is the oracle of pattern row
        r % P (``pattern_row``).
        """
        flat = pattern.to(dtype).contiguous().reshape(-1)
        return TiledSpec(pattern=self.add(flat), pattern_rows=int(pattern.shape[0]), size=[rows, int(pattern.shape[1])],
                         offset=GUARD)

    def pattern_row(self, spec: TiledSpec, row: int) -> torch.Tensor:
        """Row ``row`` of a tiled tensor as the child builds it (1-D, the spec's dtype)."""
        cols = spec.size[1]
        index = row % spec.pattern_rows
        return self.bases[spec.pattern][index * cols:(index + 1) * cols].clone()


@dataclass(frozen=True)
class PlannedOutput:
    """One declared output of a tuple-returning call: its name, tolerance and dtype."""

    name: str
    tolerance: Tolerance
    dtype: torch.dtype


@dataclass
class OutputExpectation:
    """What one output of one round must be (``PlannedCall.expectations``)."""

    index: int
    name: str
    expected: torch.Tensor
    scale: torch.Tensor
    slack: torch.Tensor | None
    tolerance: Tolerance
    dtype: torch.dtype | None


@dataclass
class PlannedCall:
    """One call the child makes, and what the parent expects of it.

    Attributes:
        id: unique in the plan ("check/index").
        args, kwargs: the arguments (views of the bank's bases, or scalars).
        expect: ``output`` (compare with the oracle) or ``raise`` (the call must raise).
        label: the call's inputs in words, for messages ("(4, 1000) float16").
        expected, scale: per round, the fp64 oracle and the error scale of each output element.
        slack: per round, the extra error the allowed arithmetic makes at each element
            (grader.checks.tolerance.Tolerance.allowed), or an empty list for none.
        tolerance: the dtype's tolerance (grader.checks.tolerance.Tolerance).
        out_dtype: the dtype the output must have.
        refills: per further round, argument position -> base holding the new values.
        save_inputs_after: the child saves the bases as they are after the call.
        record_launches: the child records the call's Triton launches, which are replayed on
            ``replay_args``/``replay_kwargs`` (other values, the same layouts); the replayed
            output must match ``replay_expected`` within ``tolerance`` (check ``triton_kernel``).
        replay_slack: the slack of the replay inputs (as ``slack`` is of the call's own).
        sample_rows: the child sends back only these rows of the output (for outputs too large
            to send whole); ``expected``/``scale``/``slack`` then hold those rows only.
        extra: check-specific data (e.g. central-difference points).
        outputs: for a call that returns a tuple, its outputs (``PlannedOutput``); then every
            round's entry of ``expected``/``scale``/``slack`` (and ``replay_expected``,
            ``replay_scale``, ``replay_slack``) is a tuple with one tensor per output, and
            ``tolerance``/``out_dtype`` are those of the first. Empty: one tensor is returned.
            ``expectations(round)`` gives either form as one list.
    """

    id: str
    args: list[ArgSpec]
    expect: str = "output"
    label: str = ""
    kwargs: dict[str, ArgSpec] = field(default_factory=dict)
    expected: list[torch.Tensor] = field(default_factory=list)
    scale: list[torch.Tensor] = field(default_factory=list)
    slack: list[torch.Tensor] = field(default_factory=list)
    tolerance: Tolerance | None = None
    out_dtype: torch.dtype | None = None
    refills: list[dict[int, str]] = field(default_factory=list)
    save_inputs_after: bool = False
    record_launches: bool = False
    replay_args: list[ArgSpec] = field(default_factory=list)
    replay_kwargs: dict[str, ArgSpec] = field(default_factory=dict)
    replay_expected: torch.Tensor | None = None
    replay_scale: torch.Tensor | None = None
    replay_slack: torch.Tensor | None = None
    sample_rows: list[int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    outputs: list[PlannedOutput] = field(default_factory=list)

    def expectations(self, round_index: int = 0) -> list[OutputExpectation]:
        """Every output of round ``round_index`` with its oracle, scale, slack, tolerance, dtype."""
        slack = self.slack[round_index] if round_index < len(self.slack) else None
        if not self.outputs:
            return [OutputExpectation(0, "out", self.expected[round_index], self.scale[round_index], slack,
                                      self.tolerance, self.out_dtype)]
        return [OutputExpectation(k, out.name, self.expected[round_index][k], self.scale[round_index][k],
                                  None if slack is None else slack[k], out.tolerance, out.dtype)
                for k, out in enumerate(self.outputs)]

    def replay_expectations(self) -> list[OutputExpectation]:
        """Every output of the replayed launches with its oracle (``replay_expected``...); empty
        for a call that is not replayed."""
        if self.replay_expected is None:
            return []
        if not self.outputs:
            return [OutputExpectation(0, "out", self.replay_expected, self.replay_scale, self.replay_slack,
                                      self.tolerance, self.out_dtype)]
        return [OutputExpectation(k, out.name, self.replay_expected[k], self.replay_scale[k],
                                  None if self.replay_slack is None else self.replay_slack[k], out.tolerance, out.dtype)
                for k, out in enumerate(self.outputs)]

    @property
    def round_ids(self) -> list[str]:
        """The ids of the call's rounds: ``id``, then ``id@1``, ``id@2``, ... per refill."""
        return [self.id] + [f"{self.id}@{i + 1}" for i in range(len(self.refills))]

    def tensors(self) -> list[TensorSpec]:
        """The tensor arguments (positional, then keyword)."""
        every = [*self.args, *self.kwargs.values()]
        return [a for a in every if isinstance(a, TensorSpec)]

    def to_spec(self) -> CallSpec:
        return CallSpec(id=self.id, args=self.args, kwargs=self.kwargs, refills=self.refills,
                        save_inputs_after=self.save_inputs_after, record_launches=self.record_launches,
                        replay_args=self.replay_args, replay_kwargs=self.replay_kwargs,
                        sample_rows=self.sample_rows)

    def slack_of(self, round_index: int) -> torch.Tensor | None:
        """The slack of a round, or None when the call has none."""
        return self.slack[round_index] if round_index < len(self.slack) else None


@dataclass
class CallEvidence:
    """What came back for one round of a call.

    Attributes:
        report: the child's validated report, or None when it sent none (it stopped first).
        out: the returned tensor as read back (CPU, same dtype), or None.
        bases_after: base name -> the base buffer as it was after the call (when asked for).
        replay_out: the output of the call's recorded launches replayed on its replay inputs
            (by the child under the interpreter, by the trusted replay process on a GPU).
        replay_error: why there is no replay output although the call was recorded.
        replay_inputs_modified: on a GPU, the input buffers (``arg<i>``/``kwarg_<name>``, whole
            bases with their guards) that the trusted replay process saw the recorded launches
            change; None when no trusted replay of the call ran (the CPU interpreter, a call
            not recorded, a replay that raised).
        more_outs / more_replay_outs: a tuple-returning call's further outputs (output 1, 2,
            ...), as read back and as replayed; ``outs()`` and ``replay_outs()`` give them all.
    """

    report: CallReport | None
    out: torch.Tensor | None
    bases_after: dict[str, torch.Tensor] = field(default_factory=dict)
    replay_out: torch.Tensor | None = None
    replay_error: str | None = None
    replay_inputs_modified: list[str] | None = None
    more_outs: list[torch.Tensor | None] = field(default_factory=list)
    more_replay_outs: list[torch.Tensor | None] = field(default_factory=list)

    def outs(self) -> list[torch.Tensor | None]:
        """Every output as read back, in return order."""
        return [self.out, *self.more_outs]

    def replay_outs(self) -> list[torch.Tensor | None]:
        """Every output of the replayed launches, in return order."""
        return [self.replay_out, *self.more_replay_outs]


@dataclass
class CheckEvidence:
    """Everything a check's ``evaluate`` may look at.

    Attributes:
        calls: per-round evidence, keyed by round id.
        bank: the input bank.
        earlier: the outcomes of the checks evaluated before this one (plan order), so that a
            check can tell whether a failure is its own or one an earlier check already shows.
        stopped: round id -> why the process running it stopped without a report (the parent's
            words, e.g. a crash of the isolated large_offsets child).
    """

    calls: dict[str, CallEvidence]
    bank: InputBank
    earlier: dict[str, CheckOutcome] = field(default_factory=dict)
    stopped: dict[str, str] = field(default_factory=dict)


@dataclass
class PlannedCheck:
    """A named check: its calls and the function that turns their evidence into a verdict.

    Attributes:
        name: the public check name.
        calls: the calls the child makes for it.
        evaluate: evidence -> outcome.
        isolated: run in a child process of its own, after every other check (a check that can
            crash the process, e.g. large_offsets, must not take the others' verdicts with it).
        skip_reason: when set, the check is not run and is reported as skipped with this reason
            (e.g. GPU-only checks on the CPU interpreter).
        reads_replay: evaluated again once the trusted replay's evidence is in (on a GPU the
            checks are evaluated before the replay ends, to decide whether the benchmark rows
            count, and again after it: the aggregate checks always, a check with calls only when
            this is set, e.g. output_contract, whose "inputs untouched" the replay observes).
    """

    name: str
    calls: list[PlannedCall]
    evaluate: Callable[[PlannedCheck, CheckEvidence], CheckOutcome]
    isolated: bool = False
    skip_reason: str | None = None
    reads_replay: bool = False


class Plan:
    """All checks of one grading run, with their inputs. Built in the parent only.

    Attributes:
        seed: the seed of ``generator``, recorded in the result.
        device: ``cpu`` (Triton interpreter) or ``cuda``.
        generator: the one torch.Generator every input of the run is drawn from.
        bank: the base buffers (an assignment may pass its own ``InputBank`` subclass).
        checks: the checks in the assignment's order.
        outputs: how many tensors every call returns (1: a tensor; more: a tuple).
    """

    def __init__(self, *, seed: int, device: str, bank: InputBank | None = None) -> None:
        self.seed = seed
        self.device = device
        self.generator = torch.Generator().manual_seed(seed)
        self.bank = bank if bank is not None else InputBank()
        self.checks: list[PlannedCheck] = []
        self.outputs = 1

    def calls(self) -> dict[str, PlannedCall]:
        """Every planned call by id."""
        return {call.id: call for check in self.checks for call in check.calls}

    def steps(self, *, isolated: bool) -> list[PlannedCheck]:
        """The checks one child runs, in plan order: the main child's (``isolated=False``; the
        aggregate checks, without calls, are empty steps there) or those that run in a process
        of their own. Skipped checks are not steps."""
        return [c for c in self.checks if c.skip_reason is None and c.isolated == isolated
                and (c.calls or not isolated)]

    def to_protocol(self, *, function: str, module_file: str, other_device: str, isolated: bool = False) -> CheckPlan:
        """The plan as one child reads it (``plan.json``): the steps of ``steps(isolated=...)``."""
        return CheckPlan(
            function=function,
            module_file=module_file,
            device=self.device,
            other_device=other_device,
            outputs=self.outputs,
            steps=[StepSpec(check=c.name, calls=[call.to_spec() for call in c.calls])
                   for c in self.steps(isolated=isolated)],
        )


def scalar(value: int | float | bool) -> ScalarSpec:
    """A scalar argument."""
    return ScalarSpec(value=value)
