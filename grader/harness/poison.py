"""Memory a submission allocates and never writes holds one recognisable value: the poison.

``torch.empty`` returns whatever the allocator's memory held: a kernel that accumulates into an
``empty`` scratch buffer it never zeroes, or returns elements it never wrote, then gives outputs
that change from run to run, and so a different set of failed checks each time (issue #37).
``install()``, called by the check child before the submission is imported, makes them the same
every run:

- PyTorch's deterministic mode with ``torch.utils.deterministic.fill_uninitialized_memory``:
  every uninitialised allocation (``empty``, ``new_empty``, ``resize_``, the legacy
  constructors, C++ ones) is filled, floats with NaN, integers with their maximum. ``warn_only``:
  an operation without a deterministic implementation still runs (and its warning is filtered
  out of the student's log), as it does in the course's kernels.
- the Python allocation functions a wrapper calls (``torch.empty``, ``empty_like``,
  ``empty_strided``, ``Tensor.new_empty``, ``Tensor.new_empty_strided``) then overwrite the new
  storage with ``POISON_BYTE`` in every byte: NaN with every payload bit set in every float
  dtype (0xFFFF, 0xFFFFFFFF, ...), -1 in integers. The trusted replay fills a recording's
  output and scratch buffers with the same bytes (launches.fresh_buffers), so a call and its
  replay see the same poison. NaN arithmetic on a CPU keeps the first NaN operand's payload,
  so an output of all-one bits (grader/checks/poison.py ``unwritten_outputs``) shows memory that was
  never written, accumulated into or returned as it was; the NaN the grader puts around the
  inputs (0x7FC00000) and the NaN a CPU computes (0xFFC00000) are other patterns.

Imports only the standard library at module level (the parent imports the constants).
"""

from __future__ import annotations

import functools
import warnings

#: Every byte of fresh memory from the wrapped allocation functions.
POISON_BYTE = 0xFF

#: The PyTorch warning of an operation without a deterministic implementation (warn_only).
_DETERMINISTIC_WARNING = r".*(deterministic|fill_uninitialized_memory).*"


def _poisoned(allocate, torch, disable_modes):
    @functools.wraps(allocate)
    def allocate_poisoned(*args, **kwargs):
        tensor = allocate(*args, **kwargs)
        if "out" in kwargs:  # existing memory (maybe an input's): only the resize's new bytes are torch's to fill
            return tensor
        try:
            if isinstance(tensor, torch.Tensor) and tensor.dtype != torch.bool and tensor.device.type != "meta":
                with disable_modes():  # not an operation of the submission's (the launch recorder's view)
                    tensor.untyped_storage().fill_(POISON_BYTE)
        except Exception:  # noqa: BLE001 - an odd tensor keeps torch's own fill
            pass
        return tensor

    return allocate_poisoned


def install() -> bool:
    """Deterministic fill plus the poison (see the module docstring). False when this torch
    has no ``fill_uninitialized_memory`` (then nothing is changed)."""
    import torch

    deterministic = getattr(getattr(torch, "utils", None), "deterministic", None)
    if deterministic is None or not hasattr(deterministic, "fill_uninitialized_memory"):
        return False
    try:
        from torch.utils._python_dispatch import _disable_current_modes as disable_modes
    except ImportError:  # pragma: no cover - an older torch
        import contextlib

        disable_modes = contextlib.nullcontext
    torch.use_deterministic_algorithms(True, warn_only=True)
    deterministic.fill_uninitialized_memory = True
    warnings.filterwarnings("ignore", message=_DETERMINISTIC_WARNING)
    for owner, name in ((torch, "empty"), (torch, "empty_like"), (torch, "empty_strided"),
                        (torch.Tensor, "new_empty"), (torch.Tensor, "new_empty_strided")):
        original = getattr(owner, name, None)
        if original is not None:
            setattr(owner, name, _poisoned(original, torch, disable_modes))
    return True
