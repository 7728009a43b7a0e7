"""``grader new-assignment``: the scaffold writes a complete new assignment that the generic core
grades as it is: its plan builds from the declarations, its reference passes every check in the
sandboxed child on the CPU interpreter, its starter template does not, and nothing outside the
new folders is written.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
from grading_support import requires_bwrap

from grader import manifest as manifest_module
from grader.manifest import AssignmentManifest
from grader.scaffold import manifest_entry, scaffold

NAME = "scaffolded_product"


def _register(name: str, root, dims=("M", "N")):
    """Write the scaffold into ``root`` and register it as ``grader.assignments.<name>`` with the
    manifest entry the command prints; returns (written paths, ASSIGNMENT, undo)."""
    written = scaffold(name, root, dims=dims)
    return (written, *_register_again(name, root)[1:])


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory):
    """The scaffold written into an empty checkout, registered as ``grader.assignments.<NAME>``
    with the manifest entry the command prints (both undone afterwards)."""
    root = tmp_path_factory.mktemp("checkout")
    written, assignment, undo = _register(NAME, root)
    yield root, written, assignment
    undo()


def test_the_scaffold_writes_only_its_folders_and_refuses_to_overwrite(scaffolded, tmp_path):
    root, written, _ = scaffolded
    tops = {path.relative_to(root).parts[:3] for path in written}
    assert tops == {("grader", "assignments", NAME), ("tests", "corpus", NAME), ("tests", "grader", "assignments")}
    with pytest.raises(FileExistsError):
        scaffold(NAME, root)
    with pytest.raises(ValueError):
        scaffold("Not-a-name", tmp_path)
    assert f'package="grader.assignments.{NAME}"' in manifest_entry(NAME, NAME)


def test_the_plan_builds_from_the_declarations(scaffolded):
    _, _, assignment = scaffolded
    plan = assignment.build_plan(seed=0, device="cpu")
    assert tuple(c.name for c in plan.checks) == assignment.check_names
    contract = next(c for c in plan.checks if c.name == "output_contract")
    assert any(call.args[0].stride[0] == 1 for call in contract.calls)  # a transposed x was added


@requires_bwrap
def test_the_scaffolded_reference_passes_and_the_template_does_not(scaffolded):
    from grader.runner import grade_source

    _, _, assignment = scaffolded
    document = grade_source(assignment.reference_file.read_bytes(), assignment=NAME, device="cpu")
    failed = {c.name: c.message for c in document.checks if not c.passed and not c.skipped}
    assert document.verdict.value == "passed", (failed, document.error)
    template = grade_source(assignment.template_file.read_bytes(), assignment=NAME, device="cpu")
    assert template.verdict.value != "passed"


@requires_bwrap
def test_a_4d_scaffold_declares_its_axes_and_its_reference_passes(tmp_path):
    """``grader new-assignment NAME --dims B,H,S,D``: every declaration, the timed selection and
    the reference kernel follow the four axes; the contract adds the 4-D transposed case."""
    from grader.runner import grade_source

    name = "scaffolded_heads"
    _, assignment, undo = _register(name, tmp_path, dims=("B", "H", "S", "D"))
    try:
        assert assignment.inputs[0].dims == ("B", "H", "S", "D")
        assert assignment.benchmark.selection.outputs == {"out": ("B", None, None, None)}
        assert all(len(shape) == 4 for shape in assignment.benchmark.shapes)
        plan = assignment.build_plan(seed=0, device="cpu")
        contract = next(c for c in plan.checks if c.name == "output_contract")
        assert any(call.args[0].stride[-2] == 1 for call in contract.calls)  # last two axes swapped
        document = grade_source(assignment.reference_file.read_bytes(), assignment=name, device="cpu")
        failed = {c.name: c.message for c in document.checks if not c.passed and not c.skipped}
        assert document.verdict.value == "passed", (failed, document.error)
    finally:
        undo()
    with pytest.raises(ValueError, match="1 to 4 distinct axes"):
        scaffold("too_many_axes", tmp_path, dims=("A", "B", "C", "D", "E"))


def test_a_broken_declaration_is_the_assignments_error_with_its_check_case_and_traceback(tmp_path, capsys):
    """A layout that does not fit the rank: ``grader check`` stops before any child, names the
    assignment, the check and the case with the traceback, and says it is not the submission's."""
    import json

    from grader.cli import main

    name = "scaffolded_broken"
    root = tmp_path / "checkout"
    root.mkdir()
    _register(name, root)[2]()  # written, then unregistered until its spec is broken
    undo = None
    try:
        spec = root / "grader" / "assignments" / name / "spec.py"
        text = spec.read_text()
        assert 'layouts={"x": _STRIDED[0], "y": "step"}' in text
        spec.write_text(text.replace('layouts={"x": _STRIDED[0], "y": "step"}', 'layouts={"x": "transposed", "y": "diagonal"}'))
        _, assignment, undo = _register_again(name, root)
        document_file = tmp_path / "result.json"
        code = main(["check", str(assignment.reference_file), "--assignment", name, "--device", "cpu",
                     "--json", str(document_file)])
        printed = capsys.readouterr().out
        document = json.loads(document_file.read_text())
    finally:
        if undo is not None:
            undo()
    assert code == 3 and document["verdict"] == "error", document
    message = document["error"]["message"]
    assert message.startswith(f"assignment error (its declarations, not the submission): assignment {name}: check "
                              "'strided_inputs', case "), message
    assert "no layout 'diagonal'" in message and "Traceback (most recent call last)" in message
    assert "assignment error" in printed and "infrastructure error" not in printed


def _register_again(name, root):
    """Register a written scaffold (again, after its files were edited); returns (None,
    ASSIGNMENT, undo)."""
    package = root / "grader" / "assignments" / name
    entry = AssignmentManifest(name=name, title="scaffold", function=name, arguments=("x", "y"),
                               module_file=f"{name}.py", package=f"grader.assignments.{name}")
    manifest_module.MANIFESTS[name] = entry
    spec = importlib.util.spec_from_file_location(entry.package, package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[entry.package] = module
    spec.loader.exec_module(module)

    def undo():
        del manifest_module.MANIFESTS[name]
        for key in [k for k in sys.modules if k.startswith(entry.package)]:
            del sys.modules[key]

    return None, module.ASSIGNMENT, undo
