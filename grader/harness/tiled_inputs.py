"""Tiled inputs of the check child (harness file, run in the sandbox): the large arguments a plan
describes as a pattern of rows repeated (``large_offsets``' tensors past 2^31 elements), built
on the device before the submission is imported."""

from __future__ import annotations


def build_tiled_inputs(plan, bases: dict, device: str) -> dict:
    """Build every ``tiled`` argument of the plan on the device, before the submission is
    imported (nothing of the submission can have taken the memory yet): a NaN-filled buffer of
    offset + rows*cols + offset elements whose middle rows repeat the pattern's rows.

    Returns:
        (pattern base, rows, cols, offset) -> the (rows, cols) view (one tensor per distinct spec).

    Raises:
        Whatever allocation raises (e.g. torch.OutOfMemoryError); the caller reports it as
        phase ``inputs`` and the parent skips those checks.
    """
    import torch

    built: dict = {}
    for step in plan.steps:
        for call in step.calls:
            for arg in [*call.args, *call.kwargs.values()]:
                key = tiled_key(arg)
                if arg.kind != "tiled" or key in built:
                    continue
                rows, cols = arg.size
                pattern = bases[arg.pattern].view(arg.pattern_rows, cols)
                flat = torch.full((arg.offset + rows * cols + arg.offset,), float("nan"), dtype=pattern.dtype,
                                  device=device)
                view = flat[arg.offset:arg.offset + rows * cols].view(rows, cols)
                whole = rows // arg.pattern_rows * arg.pattern_rows
                if whole:
                    view[:whole].view(-1, arg.pattern_rows, cols).copy_(
                        pattern.unsqueeze(0).expand(whole // arg.pattern_rows, arg.pattern_rows, cols))
                if rows > whole:
                    view[whole:].copy_(pattern[:rows - whole])
                built[key] = view
    return built


def tiled_key(arg) -> tuple:
    """The key of a tiled argument in build_tiled_inputs' result."""
    return (getattr(arg, "pattern", None), tuple(getattr(arg, "size", ())), getattr(arg, "offset", 0))
