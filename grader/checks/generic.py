"""The generic checks, written once: a plan built from an assignment's declarations.

An assignment declares its call (``TensorInput``/``ScalarInput``, ``TensorOutput`` with a
tolerance table), its maths (``make_case``, ``oracle``) and its checks as data
(grader/assignments/protocol.py: ``ValueCheck``, ``CentralDifference``, ``Invariant``,
``Bounds``, ``OutputContract``, ``RejectsMismatch``, ``RejectsRequiresGrad``, ``Rejects``,
``FreshResults``, ``TritonKernel``, ``CustomCheck``); ``build_plan`` turns them into the
``Plan`` the runner sends to the child. Every float input is rounded to the call's dtype and
placed as a strided view inside NaN guards (grader.checks.plan.InputBank), the oracle is computed from
the values as placed, and every value call records its Triton launches to be replayed on new
values of the same layout (check ``triton_kernel``). Nothing here names an assignment.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from grader.assignments.protocol import (
    Bounds,
    Case,
    CaseSpec,
    CentralDifference,
    CheckDecl,
    CustomCheck,
    Declared,
    FreshResults,
    Invariant,
    OutputContract,
    Rejects,
    RejectsMismatch,
    RejectsRequiresGrad,
    ScalarInput,
    TensorInput,
    TrainingStep,
    TritonKernel,
    ValueCheck,
)
from grader.checks.evaluate import (
    call_outputs,
    evaluate_output_contract,
    evaluate_raises,
    evaluate_triton_kernel,
    evaluate_values,
    hint_for,
    hinted,
    point_failure,
    tolerance_fields,
)
from grader.checks.plan import (
    AssignmentError,
    CheckEvidence,
    InputBank,
    Plan,
    PlannedCall,
    PlannedCheck,
    PlannedOutput,
    dtype_name,
    layout_of,
    scalar,
)
from grader.checks.tolerance import Tolerance
from grader.report.document import CheckOutcome


def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


class PlanBuilder:
    """Builds the calls of the generic checks for one assignment and one plan."""

    def __init__(self, declared: Declared, plan: Plan) -> None:
        self.declared = declared
        self.plan = plan
        self.tensor_inputs = [i for i in declared.inputs if isinstance(i, TensorInput)]
        self.scalar_inputs = [i for i in declared.inputs if isinstance(i, ScalarInput)]
        #: the case being built, in words (an AssignmentError names it)
        self.current = ""

    # ---- cases and placement ----------------------------------------------------------------
    def case(self, spec: CaseSpec) -> Case:
        """New values for ``spec`` from the plan's generator (its own ``draw``, else the
        assignment's ``make_case``)."""
        self.current = self.label(spec)
        if spec.draw is not None:
            return spec.draw(self.plan.generator)
        return self.declared.make_case(self.plan.generator, spec.dims, spec.exact)

    def input_dtype(self, item: TensorInput, call_dtype: str) -> torch.dtype:
        return _torch_dtype(call_dtype if item.dtype == "call" else item.dtype)

    def output_dtype(self, dtype: str, call_dtype: str) -> torch.dtype:
        return _torch_dtype(call_dtype if dtype == "call" else dtype)

    def place(self, case: Case, spec: CaseSpec) -> tuple[list, dict, dict]:
        """(positional tensor args, keyword scalars, values as placed by input name)."""
        args, kwargs, placed = [], {}, {}
        for item in self.tensor_inputs:
            dtype = _torch_dtype(spec.dtypes[item.name]) if item.name in spec.dtypes else self.input_dtype(item, spec.dtype)
            view = self.plan.bank.view(case.values[item.name], dtype, layout_of(spec.layouts.get(item.name, "contiguous")))
            args.append(view)
            placed[item.name] = self.plan.bank.values_of(view)
        for item in self.scalar_inputs:
            if item.name in spec.scalars or item.name in case.values:
                value = spec.scalars.get(item.name, case.values.get(item.name))
                kwargs[item.name] = scalar(value)
                placed[item.name] = value
            else:
                placed[item.name] = item.default
        return args, kwargs, placed

    def oracle(self, placed: Mapping) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
        """(expected, scale, slack) of every output, in declaration order."""
        found = self.declared.oracle(placed)
        return [(found[o.name].expected, found[o.name].scale, found[o.name].slack) for o in self.declared.outputs]

    def label(self, spec: CaseSpec, case: Case | None = None) -> str:
        """The spec's label, else the drawn case's (or dims and dtype) with the layouts and
        scalar arguments."""
        if spec.label:
            return spec.label
        layouts = "".join(f", {name} {layout}" for name, layout in spec.layouts.items() if str(layout) != "contiguous")
        scalars = "".join(f", {k}={v}" for k, v in spec.scalars.items())
        if case is not None and case.label:
            return f"{case.label}{layouts}{scalars}"
        dims = ", ".join(str(v) for v in spec.dims.values())
        return f"({dims}) {spec.dtype}{layouts}{scalars}"

    def _pack(self, call: PlannedCall, per_output: list, *, replay: bool = False) -> None:
        """Put per-output (expected, scale, slack) on the call: tensors for one output, tuples for several."""
        single = len(per_output) == 1
        expected = per_output[0][0] if single else tuple(p[0] for p in per_output)
        scale = per_output[0][1] if single else tuple(p[1] for p in per_output)
        slacks = [p[2] for p in per_output]
        slack = None if all(s is None for s in slacks) else (slacks[0] if single else tuple(slacks))
        if replay:
            call.replay_expected, call.replay_scale, call.replay_slack = expected, scale, slack
            return
        call.expected.append(expected)
        call.scale.append(scale)
        if slack is not None:
            call.slack.append(slack)

    def value_call(self, call_id: str, spec: CaseSpec, *, case: Case | None = None, reference=None,
                   record: bool = True, replay_same_inputs: bool = False) -> PlannedCall:
        """A call on ``spec``'s inputs with the oracle of the values as placed (or ``reference``'s
        expected values, scale and slack still the oracle's); when ``record``, its launches are
        recorded and replayed on new values of the same layouts, or, with
        ``replay_same_inputs``, on the very bases the call got (the contract's calls on a GPU:
        the trusted replay then observes those inputs after the launches)."""
        case = case or self.case(spec)
        args, kwargs, placed = self.place(case, spec)
        per_output = self.oracle(placed)
        fixed = dict(case.expected or {})
        if reference is not None:
            fixed.update(reference(case, placed))
        per_output = [(fixed.get(out.name, p[0]), p[1], p[2]) for out, p in zip(self.declared.outputs, per_output)]
        outputs = [PlannedOutput(out.name, out.tolerances[spec.dtype], self.output_dtype(out.dtype, spec.dtype))
                   for out in self.declared.outputs]
        call = PlannedCall(id=call_id, args=args, kwargs=kwargs, label=self.label(spec, case),
                           tolerance=outputs[0].tolerance, out_dtype=outputs[0].dtype,
                           outputs=outputs if len(outputs) > 1 else [], record_launches=record)
        self._pack(call, per_output)
        call.extra["case"], call.extra["placed"], call.extra["spec"] = case, placed, spec
        if record and replay_same_inputs:
            call.replay_args, call.replay_kwargs = list(args), dict(kwargs)
            self._pack(call, per_output, replay=True)
        elif record:
            replay = (self.declared.replay_case or (lambda generator, old: self.case(spec)))(self.plan.generator, case)
            call.replay_args = [self.plan.bank.relayout(view, replay.values[item.name])
                                for view, item in zip(args, self.tensor_inputs)]
            call.replay_kwargs = dict(kwargs)
            again = {item.name: self.plan.bank.values_of(view) for view, item in zip(call.replay_args, self.tensor_inputs)}
            again.update({k: placed[k] for k in placed if k not in again})
            self._pack(call, self.oracle(again), replay=True)
        return call

    def raise_call(self, call_id: str, label: str, args: list, kwargs: dict) -> PlannedCall:
        return PlannedCall(id=call_id, args=args, kwargs=kwargs, expect="raise", label=label)

    # ---- the checks -------------------------------------------------------------------------
    def hint(self, name: str) -> str:
        return self.declared.hints[name]

    def values_evaluator(self, name: str):
        def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
            return evaluate_values(check, evidence, hint=self.hint(name), diagnose=self.declared.diagnose,
                                   hint_requires=tuple(self.declared.hint_requires.get(name, ())))

        return evaluate

    def build(self, decl: CheckDecl) -> PlannedCheck:
        method = getattr(self, f"_{type(decl).__name__}")
        return method(decl)

    def _ValueCheck(self, decl: ValueCheck) -> PlannedCheck:
        calls = []
        if decl.example is not None:
            spec = decl.cases[0] if decl.cases else CaseSpec(dims={})
            calls.append(self.value_call(f"{decl.name}/0", spec, case=decl.example()))
        for spec in decl.cases[1 if decl.example is not None else 0:]:
            call = self.value_call(f"{decl.name}/{spec.key or len(calls)}", spec, reference=decl.reference)
            if any(str(layout) != "contiguous" for layout in spec.layouts.values()):
                call.label += " (" + ", ".join(f"{item.name} strides {tuple(view.stride)}" for item, view in
                                               zip(self.tensor_inputs, call.args) if item.name in spec.layouts) + ")"
            calls.append(call)
        return PlannedCheck(decl.name, calls, self.values_evaluator(decl.name))

    def _CentralDifference(self, decl: CentralDifference) -> PlannedCheck:
        calls = []
        for spec in decl.cases:
            call = self.value_call(f"{decl.name}/{spec.key or len(calls)}", spec)
            case = call.extra["case"]
            if decl.at_placed and decl.variable in call.extra["placed"]:
                variable = call.extra["placed"][decl.variable].to(torch.float64)
            else:
                variable = (case.hidden.get(decl.variable) if decl.variable in case.hidden
                            else case.values[decl.variable]).to(torch.float64)
            indices = list(decl.chosen(case)) if decl.chosen is not None else []
            while len(indices) < decl.points:
                flat = int(torch.randint(variable.numel(), (1,), generator=self.plan.generator))
                indices.append(tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), variable.shape)))
            points = []
            for index in indices:
                plus, minus = variable.clone(), variable.clone()
                plus[index] += decl.h
                minus[index] -= decl.h
                slope = (float(decl.loss(case, plus)) - float(decl.loss(case, minus))) / (2 * decl.h)
                points.append((index, slope))
            call.extra["points"] = points
            calls.append(call)
        output = [o.name for o in self.declared.outputs].index(decl.output)
        hint = self.hint(decl.name)

        def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
            worst, cases, fields = 0.0, 0, {}
            for call in check.calls:
                outs, failure = call_outputs(check, call, evidence, hint)
                if failure is not None:
                    return failure
                expectation = call.expectations(0)[output]
                # The output's own rule (its rtol and, for a half-precision output, its vtol and
                # the slack of the allowed roundings at the point), with atol the finite
                # difference's error instead of the output's floor.
                tolerance = Tolerance(rtol=expectation.tolerance.rtol, vtol=expectation.tolerance.vtol, atol=decl.atol,
                                      why=f"the output's rtol{' and vtol' if expectation.tolerance.vtol else ''} "
                                          f"plus {decl.atol:g} for the finite-difference error (h={decl.h:g}, fp64)")
                fields = tolerance_fields(tolerance)
                for index, slope in call.extra["points"]:
                    value = float(outs[output][index].double())
                    slack = None if expectation.slack is None else expectation.slack[index]
                    allowed = float(tolerance.allowed(torch.tensor(slope, dtype=torch.float64),
                                                      expectation.scale[index], slack))
                    err = abs(value - slope)
                    worst = max(worst, err / allowed if math.isfinite(err) else math.inf)
                    cases += 1
                    if not err <= allowed:
                        return CheckOutcome(
                            name=check.name, passed=False, max_err_over_tolerance=worst,
                            message=f"{call.label} at {decl.variable}{list(index)}: {decl.output} = {value:.8g}, "
                                    f"central difference = {slope:.8g} (|err| {err:.3g} > allowed {allowed:.3g}; "
                                    f"tolerance {tolerance.describe_short()}). Hint: {hint}",
                            **point_failure(fields, call.label, list(index), value, slope, allowed, hint=hint))
            return CheckOutcome(name=check.name, passed=True, max_err_over_tolerance=worst, cases=cases,
                                message=f"{cases} points, h = {decl.h:g}, worst error {worst:.2g} of tolerance",
                                **fields)

        return PlannedCheck(decl.name, calls, evaluate)

    def _Invariant(self, decl: Invariant) -> PlannedCheck:
        calls = []
        output = [o.name for o in self.declared.outputs].index(decl.output)
        for spec in decl.cases:
            call = self.value_call(f"{decl.name}/{spec.key or len(calls)}", spec)
            weights = decl.weights(call.extra["case"], call.extra["placed"]) if decl.weights is not None else None
            call.extra["weights"] = None if weights is None else weights.to(torch.float64)
            calls.append(call)
        hint = self.hint(decl.name)
        requires = tuple(self.declared.hint_requires.get(decl.name, ()))
        weighted = " times |weights|" if decl.weights is not None else ""

        def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
            worst, fields = 0.0, {}
            for call in check.calls:
                outs, failure = call_outputs(check, call, evidence, hint)
                if failure is not None:
                    return failure
                expectation = call.expectations(0)[output]
                bound = expectation.tolerance.bound()
                fields = tolerance_fields(expectation.tolerance,
                                          f"the sum of the per-element bounds ({bound}){weighted}")
                weights = call.extra["weights"]
                weights = torch.ones_like(expectation.expected) if weights is None else weights
                got = (outs[output].double() * weights).sum(dim=decl.dim)
                expected = (expectation.expected * weights).sum(dim=decl.dim)
                allowed = (expectation.tolerance.allowed(expectation.expected, expectation.scale, expectation.slack)
                           * weights.abs()).sum(dim=decl.dim)
                ratio = ((got - expected).abs() / allowed).nan_to_num(nan=math.inf)
                worst = max(worst, float(ratio.max()))
                if not bool((ratio <= 1).all()):
                    at = int(ratio.argmax())
                    where = (decl.where(call.extra["placed"], at) if decl.where is not None
                             else f"{decl.output} at {at} along the reduced axis")
                    return CheckOutcome(
                        name=check.name, passed=False, max_err_over_tolerance=worst,
                        message=f"{call.label}: {where} sums to "
                                f"{float(got.reshape(-1)[at]):.6g}, expected {float(expected.reshape(-1)[at]):.3g} "
                                f"(allowed {float(allowed.reshape(-1)[at]):.3g})." + hint_for(evidence, hint, requires),
                        **{**fields, "details": hinted(fields.get("details"), hint_for(evidence, hint, requires))})
            return CheckOutcome(name=check.name, passed=True, max_err_over_tolerance=worst,
                                message=f"{decl.output} {decl.what} (worst {worst:.2g} of tolerance)", **fields)

        return PlannedCheck(decl.name, calls, evaluate)

    def _Bounds(self, decl: Bounds) -> PlannedCheck:
        """Each element of the output within the assignment's bounds of the case, give or take
        the element's own allowed error; NaN is outside every bound."""
        calls = []
        output = [o.name for o in self.declared.outputs].index(decl.output)
        for spec in decl.cases:
            call = self.value_call(f"{decl.name}/{spec.key or len(calls)}", spec)
            low, high = decl.bounds(call.extra["case"], call.extra["placed"])
            call.extra["bounds"] = tuple(None if b is None else b.to(torch.float64) for b in (low, high))
            calls.append(call)
        hint = self.hint(decl.name)
        requires = tuple(self.declared.hint_requires.get(decl.name, ()))

        def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
            worst, fields, elements = 0.0, {}, 0
            for call in check.calls:
                outs, failure = call_outputs(check, call, evidence, hint)
                if failure is not None:
                    return failure
                expectation = call.expectations(0)[output]
                fields = tolerance_fields(expectation.tolerance, f"{expectation.tolerance.bound()} outside the bounds")
                got = outs[output].double()
                low, high = call.extra["bounds"]
                zero = torch.zeros_like(got)
                below = (low - got).clamp(min=0) if low is not None else zero
                above = (got - high).clamp(min=0) if high is not None else zero
                allowed = expectation.tolerance.allowed(expectation.expected, expectation.scale, expectation.slack)
                ratio = (torch.maximum(below, above) / allowed).nan_to_num(nan=math.inf)
                ratio = torch.where(torch.isfinite(got), ratio, torch.full_like(ratio, math.inf))
                worst = max(worst, float(ratio.max()) if ratio.numel() else 0.0)
                elements += got.numel()
                if not bool((ratio <= 1).all()):
                    flat = int(ratio.reshape(-1).argmax())
                    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), got.shape))
                    value = float(got[index])
                    lo = float(low.expand_as(got)[index]) if low is not None else -math.inf
                    hi = float(high.expand_as(got)[index]) if high is not None else math.inf
                    where = (decl.where(call.extra["placed"], index) if decl.where is not None
                             else f"{decl.output}{list(index)}")
                    bad = int((ratio > 1).sum())
                    return CheckOutcome(
                        name=check.name, passed=False, max_err_over_tolerance=worst,
                        message=f"{call.label}: {bad} elements of {decl.output} break the property ({decl.output} "
                                f"{decl.what}); {where} = {value:.6g}, outside [{lo:.6g}, {hi:.6g}] (allowed "
                                f"{float(allowed[index]):.3g} beyond)." + hint_for(evidence, hint, requires),
                        **point_failure(fields, call.label, list(index), value, min(max(value, lo), hi),
                                        float(allowed[index]),
                                        hint=hinted({}, hint_for(evidence, hint, requires)).get("hint")))
            return CheckOutcome(name=check.name, passed=True, max_err_over_tolerance=worst, cases=len(check.calls),
                                message=f"{elements} elements: {decl.output} {decl.what} (worst {worst:.2g} of "
                                        f"tolerance beyond)", **fields)

        return PlannedCheck(decl.name, calls, evaluate)

    def _OutputContract(self, decl: OutputContract) -> PlannedCheck:
        calls = []
        on_gpu = self.plan.device.startswith("cuda")
        for spec in contract_cases(self.declared.inputs, decl.cases):
            # On a GPU the launches are recorded and replayed by the trusted process on the very
            # bases the call got (guards included), which reports the inputs they changed: the
            # child's own "inputs after" could be a copy it restored. Replayed on the same values,
            # not new ones: the contract does not judge values, and a kernel whose arithmetic is
            # near the tolerance must not be blamed in triton_kernel for new values here. Under
            # the CPU interpreter the child would replay its own recording: nothing gained.
            call = self.value_call(f"{decl.name}/{spec.key or len(calls)}", spec, record=on_gpu,
                                   replay_same_inputs=True)
            call.save_inputs_after = True
            calls.append(call)
        hint, device = self.hint(decl.name), self.plan.device

        def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
            labels = {call_id: call.label for call_id, call in self.plan.calls().items()}
            return evaluate_output_contract(check, evidence, hint=hint, device=device, labels=labels)

        return PlannedCheck(decl.name, calls, evaluate, reads_replay=on_gpu)

    def _raises(self, name: str):
        hint = self.hint(name)

        def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
            return evaluate_raises(check, evidence, hint=hint)

        return evaluate

    def _RejectsMismatch(self, decl: RejectsMismatch) -> PlannedCheck:
        """Only real mismatches: a size is lengthened where two or more inputs share it (a GEMM's
        K in A and B, not M, which A alone has), a call-dtype input changes dtype where another
        input has the call dtype too, a fixed-dtype float input gets another float dtype. The
        other inputs are in ``decl.dtype`` (one the assignment accepts)."""
        spec = CaseSpec(dims=decl.dims, dtype=decl.dtype)
        case = self.case(spec)
        args, kwargs, _ = self.place(case, spec)
        shared = {dim for dim in decl.dims if sum(dim in item.dims for item in self.tensor_inputs) > 1}
        call_dtyped = sum(item.dtype == "call" for item in self.tensor_inputs)
        calls = []
        for position, item in enumerate(self.tensor_inputs):
            for axis, dim in enumerate(item.dims):
                if dim not in shared:
                    continue
                longer = self.case(CaseSpec(dims={**decl.dims, dim: decl.dims[dim] + 1}))
                wrong = list(args)
                wrong[position] = self.plan.bank.view(longer.values[item.name], self.input_dtype(item, decl.dtype))
                calls.append(self.raise_call(f"{decl.name}/{item.name}_{dim}", f"{item.name} with {dim} + 1 along axis "
                                             f"{axis} ({tuple(wrong[position].size)})", wrong, kwargs))
            pairs = list(decl.swaps) + ([item.dims[-2:]] if len(item.dims) >= 2 else [])
            for first, second in dict.fromkeys(tuple(p) for p in pairs):
                if (first not in item.dims or second not in item.dims or not {first, second} <= shared
                        or decl.dims[first] == decl.dims[second]):
                    continue
                a, b = item.dims.index(first), item.dims.index(second)
                values = case.values[item.name].transpose(a, b).contiguous()
                wrong = list(args)
                wrong[position] = self.plan.bank.view(values, self.input_dtype(item, decl.dtype))
                suffix = "" if (a, b) in ((0, 1), (1, 0)) and len(item.dims) == 2 else f"_{first}{second}"
                calls.append(self.raise_call(f"{decl.name}/{item.name}_transposed_shape{suffix}",
                                             f"{item.name} of shape {tuple(values.shape)} (its dims {first} and "
                                             f"{second} swapped)" if suffix else
                                             f"{item.name} of shape {tuple(values.shape)} (its dims swapped)",
                                             wrong, kwargs))
            if item.float_input and (item.dtype != "call" or call_dtyped > 1):
                wrong = list(args)
                own = decl.dtype if item.dtype == "call" else item.dtype
                other = "float32" if own != "float32" else "float16"
                wrong[position] = self.plan.bank.view(case.values[item.name], _torch_dtype(other))
                calls.append(self.raise_call(f"{decl.name}/{item.name}_dtype", f"{item.name} in {other}, the others "
                                             f"{decl.dtype}", wrong, kwargs))
        with_dims = [i for i, item in enumerate(self.tensor_inputs) if item.dims]
        if len(self.tensor_inputs) > 1 and with_dims:
            last = with_dims[-1]
            wrong = list(args)
            moved = self.plan.bank.view(case.values[self.tensor_inputs[last].name],
                                        self.input_dtype(self.tensor_inputs[last], decl.dtype))
            moved.device = "other"
            wrong[last] = moved
            calls.append(self.raise_call(f"{decl.name}/device", f"{self.tensor_inputs[last].name} on another device",
                                         wrong, kwargs))
        return PlannedCheck(decl.name, calls, self._raises(decl.name))

    def _RejectsRequiresGrad(self, decl: RejectsRequiresGrad) -> PlannedCheck:
        spec = CaseSpec(dims=decl.dims, dtype=decl.dtype)
        case = self.case(spec)
        calls = []
        for position, item in enumerate(self.tensor_inputs):
            if not item.float_input:
                continue
            args, kwargs, _ = self.place(case, spec)
            args[position].requires_grad = True
            calls.append(self.raise_call(f"{decl.name}/{item.name}", f"{item.name}.requires_grad=True", args, kwargs))
        return PlannedCheck(decl.name, calls, self._raises(decl.name))

    def _Rejects(self, decl: Rejects) -> PlannedCheck:
        calls = []
        for index, (label, spec, edit) in enumerate(decl.cases):
            case = self.case(spec)
            case = Case(values=edit(dict(case.values)), hidden=case.hidden)
            args, kwargs, _ = self.place(case, spec)
            calls.append(self.raise_call(f"{decl.name}/{spec.key or index}", label, args, kwargs))
        names = [item.name for item in self.tensor_inputs]
        if decl.other_device and not decl.cases:
            raise ValueError(f"{decl.name}: other_device needs a case to take its values from")
        for name in decl.other_device:
            first = decl.cases[0][1]
            spec = CaseSpec(dims=first.dims, dtype=first.dtype, draw=first.draw)
            args, kwargs, _ = self.place(self.case(spec), spec)
            args[names.index(name)].device = "other"
            calls.append(self.raise_call(f"{decl.name}/{name}_device", f"{name} on another device than the others",
                                         args, kwargs))
        return PlannedCheck(decl.name, calls, self._raises(decl.name))

    def _FreshResults(self, decl: FreshResults) -> PlannedCheck:
        spec = decl.case
        call = self.value_call(f"{decl.name}/0", spec)
        call.label += ", same buffers refilled"
        for _ in range(decl.refills):
            case = self.case(spec)
            refill, placed = {}, {}
            for position, item in enumerate(self.tensor_inputs):
                values = case.values[item.name].to(self.input_dtype(item, spec.dtype)).contiguous()
                refill[position] = self.plan.bank.add(values.reshape(-1))
                placed[item.name] = values
            placed.update({k: v for k, v in call.extra["placed"].items() if k not in placed})
            call.refills.append(refill)
            self._pack(call, self.oracle(placed))
        return PlannedCheck(decl.name, [call], self.values_evaluator(decl.name))

    def _TrainingStep(self, decl: TrainingStep) -> PlannedCheck:
        """The reference trajectory (the oracle's outputs as the layer's backward), one call per
        step at its states, and the two edge trajectories (every output at +- its allowed error)
        that set the bound of each step's loss.

        Each call's launches are recorded and replayed (``triton_kernel``) on the call's own
        inputs (a step's inputs come from the trajectory, not from a draw of the case): the hint
        names the batch (attention_backward's "S = 48, D = 16"), so without the replay a
        submission could answer that shape with PyTorch unseen (corpus
        attention_backward/wrong/training_batch_in_pytorch.py)."""
        problem = decl.problem()
        start = problem.init(self.plan.generator)
        params, plus, minus = dict(start), dict(start), dict(start)
        calls, reference, bounds = [], [], []
        names = [o.name for o in self.declared.outputs]
        for step in range(problem.steps):
            self.current = f"step {step} of {problem.label}"
            case = problem.inputs(params)
            spec = CaseSpec(dims={}, dtype=problem.dtype, key=str(step),
                            label=f"step {step} of {problem.label}: {case.label or 'the batch'}")
            call = self.value_call(f"{decl.name}/{step}", spec, case=case, replay_same_inputs=True)
            expectations = call.expectations(0)
            expected = {name: e.expected for name, e in zip(names, expectations)}
            allowed = {name: e.tolerance.allowed(e.expected, e.scale, e.slack) for name, e in zip(names, expectations)}
            params = problem.step(params, case, expected)
            plus = problem.step(plus, case, {n: expected[n] + allowed[n] for n in expected})
            minus = problem.step(minus, case, {n: expected[n] - allowed[n] for n in expected})
            loss, edges = problem.loss(params), (problem.loss(plus), problem.loss(minus))
            reference.append(loss)
            # the edge trajectories' distance, times the margin, and a floor of fp64 noise
            bounds.append(decl.margin * max(abs(edge - loss) for edge in edges) + 1e-12 * (1 + abs(loss)))
            calls.append(call)
        hint, requires = self.hint(decl.name), tuple(self.declared.hint_requires.get(decl.name, ()))

        def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
            state, worst = dict(start), 0.0
            first_loss = problem.loss(start)
            for step, call in enumerate(check.calls):
                outs, failure = call_outputs(check, call, evidence, hint)
                if failure is not None:
                    return failure.model_copy(update={"message": f"step {step}: {failure.message}"})
                got = {name: out.double() for name, out in zip(names, outs)}
                bad = {name: int((~torch.isfinite(t)).sum()) for name, t in got.items() if not bool(torch.isfinite(t).all())}
                if bad:
                    where = ", ".join(f"{n} {c} elements" for n, c in bad.items())
                    return CheckOutcome(
                        name=check.name, passed=False, max_err_over_tolerance=math.inf,
                        message=f"step {step} of {problem.steps} ({call.label}): the output is NaN or inf ({where}); "
                                f"the loss was {first_loss if step == 0 else reference[step - 1]:.6g} before this step "
                                f"(fp64 reference)." + hint_for(evidence, hint, requires),
                        details=hinted({}, hint_for(evidence, hint, requires)))
                state = problem.step(state, call.extra["case"], got)
                loss = problem.loss(state)
                apart = abs(loss - reference[step]) if math.isfinite(loss) else math.inf
                worst = max(worst, apart / bounds[step])
                if not apart <= bounds[step]:
                    return CheckOutcome(
                        name=check.name, passed=False, max_err_over_tolerance=worst,
                        message=f"step {step} of {problem.steps} ({problem.label}): loss {loss:.8g} with your outputs, "
                                f"{reference[step]:.8g} with the fp64 reference's: apart by {apart:.3g}, more than "
                                f"{bounds[step]:.3g} ({decl.margin:g}x how far outputs at the edge of their tolerance "
                                f"take it)." + hint_for(evidence, hint, requires),
                        details=hinted({}, hint_for(evidence, hint, requires)))
            # The loss sees only what moves it: an error in a direction the step cannot feel (the
            # null space of the layer's input, say) keeps the trajectory. So every step's outputs
            # must also be within their tolerance of the oracle's on that step's inputs, the value
            # checks' one rule; a call whose output is wrong is not replayed by triton_kernel either.
            values = evaluate_values(check, evidence, hint=hint, diagnose=self.declared.diagnose,
                                     hint_requires=requires)
            if not values.passed:
                return values.model_copy(update={
                    "message": f"the loss stayed within its bound at every step, but {values.message}"})
            return CheckOutcome(
                name=check.name, passed=True, max_err_over_tolerance=max(worst, values.max_err_over_tolerance or 0.0),
                cases=len(check.calls),
                message=f"{problem.steps} steps of {problem.label}: loss {first_loss:.6g} -> {reference[-1]:.6g}, "
                        f"yours within {worst:.2g} of the bound at every step, and every step's outputs within "
                        f"{values.max_err_over_tolerance or 0.0:.2g} of their tolerance")

        return PlannedCheck(decl.name, calls, evaluate)

    def _TritonKernel(self, decl: TritonKernel) -> PlannedCheck:
        """Replays the recorded calls of the value checks that did not fail (a failed check has
        shown the arithmetic wrong already; blaming the launches for it would mislead)."""
        plan, hint = self.plan, self.hint(decl.name)

        def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
            failed = {name for name, outcome in evidence.earlier.items() if not outcome.passed and not outcome.skipped}
            recorded = [call for other in plan.checks if other.name not in failed
                        for call in other.calls if call.record_launches]
            return evaluate_triton_kernel(check, evidence, recorded=recorded, hint=hint)

        return PlannedCheck(decl.name, [], evaluate)

    def _CustomCheck(self, decl: CustomCheck) -> PlannedCheck:
        return decl.build(self.plan, self.declared)


def contract_cases(inputs: tuple, cases: tuple[CaseSpec, ...]) -> list[CaseSpec]:
    """The output contract's cases: ``cases``, and for each call dtype among them one more per
    memory order the inputs declare (``TensorInput.strided``: the k-th added case places every
    input in the k-th of its layouts that reorders memory, the others contiguous), unless a
    case already has exactly those layouts, with the sizes of that dtype's first case.
    ``torch.empty_like`` of a transposed or permuted input keeps its strides, so a kernel that
    allocates its output that way returns a non-contiguous tensor there; with contiguous
    inputs alone the contract could not see it. Any rank: 2-D inputs by default get their
    last two axes swapped (column-major), a (B, H, S, D) input declared with
    ``Layout.permuted(0, 2, 1, 3)`` its (B, S, H, D) storage."""
    specs = list(cases)
    reordering: dict[str, list] = {}
    for item in inputs:
        if isinstance(item, TensorInput) and len(item.dims) >= 2:
            found = [layout for layout in item.strided if layout_of(layout).reorders]
            if found:
                reordering[item.name] = found
    added = [{name: layouts[k] for name, layouts in reordering.items() if k < len(layouts)}
             for k in range(max((len(v) for v in reordering.values()), default=0))]
    for dtype in dict.fromkeys(spec.dtype for spec in cases):
        first = next(spec for spec in cases if spec.dtype == dtype)
        for layouts in added:
            if not any(_same_layouts(spec.layouts, layouts) and spec.dtype == dtype for spec in specs):
                specs.append(CaseSpec(dims=first.dims, dtype=dtype, layouts=layouts, scalars=first.scalars))
    return specs


def _same_layouts(a: Mapping, b: Mapping) -> bool:
    named = {k: layout_of(v) for k, v in a.items() if str(v) != "contiguous"}
    return named == {k: layout_of(v) for k, v in b.items() if str(v) != "contiguous"}


def build_plan(declared: Declared, *, seed: int, device: str, check_names: tuple[str, ...] | None = None,
               bank: InputBank | None = None, assignment: str = "") -> Plan:
    """Every declared check's calls and oracles for one grading run, in declaration order.

    Args:
        declared: the assignment's maths and check declarations.
        seed: seeds the plan's one generator (every input of the run).
        device: ``cpu`` (Triton interpreter) or ``cuda``; passed to ``declared.checks``.
        check_names: when given, the plan's check names must equal it (the assignment's
            published order).
        bank: the input bank to place inputs in (an assignment's own ``InputBank`` subclass);
            default a new ``InputBank``.
        assignment: the assignment's name, for the messages of ``AssignmentError``.

    Raises:
        AssignmentError: a declaration failed while its calls were built (a layout that does
            not fit a rank, a ``make_case``, oracle or bounds function that raised, a check
            without a hint, a case dtype without a tolerance): names the assignment, the check
            and the case, with the traceback. The author's error: no submission is charged.
        RuntimeError: the declared checks are out of step with ``check_names``.
    """
    plan = Plan(seed=seed, device=device, bank=bank)
    plan.outputs = len(declared.outputs)
    builder = PlanBuilder(declared, plan)
    try:
        decls = declared.checks(device)
    except Exception as exc:  # noqa: BLE001 - the author's code, reported with its traceback
        raise AssignmentError(assignment, "(checks)", f"checks({device!r})", exc) from exc
    for decl in decls:
        builder.current = ""
        try:
            plan.checks.append(builder.build(decl))
        except AssignmentError:
            raise
        except Exception as exc:  # noqa: BLE001 - the author's declaration, reported with its traceback
            raise AssignmentError(assignment, getattr(decl, "name", type(decl).__name__), builder.current, exc) from exc
    names = tuple(check.name for check in plan.checks)
    if check_names is not None and names != tuple(check_names):
        raise RuntimeError(f"the declared checks {names} are out of step with the check names {tuple(check_names)}")
    return plan


def dims_label(dims: Mapping[str, int]) -> str:
    """``(M=4, N=300)``."""
    return "(" + ", ".join(f"{k}={v}" for k, v in dims.items()) + ")"


__all__ = ["AssignmentError", "PlanBuilder", "build_plan", "contract_cases", "dims_label", "dtype_name"]
