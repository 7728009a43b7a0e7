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


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory):
    """The scaffold written into an empty checkout, registered as ``grader.assignments.<NAME>``
    with the manifest entry the command prints (both undone afterwards)."""
    root = tmp_path_factory.mktemp("checkout")
    written = scaffold(NAME, root)
    package = root / "grader" / "assignments" / NAME
    entry = AssignmentManifest(name=NAME, title="scaffold", function=NAME, arguments=("x", "y"),
                               module_file=f"{NAME}.py", package=f"grader.assignments.{NAME}")
    manifest_module.MANIFESTS[NAME] = entry
    spec = importlib.util.spec_from_file_location(entry.package, package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[entry.package] = module
    spec.loader.exec_module(module)
    yield root, written, module.ASSIGNMENT
    del manifest_module.MANIFESTS[NAME]
    for key in [k for k in sys.modules if k.startswith(entry.package)]:
        del sys.modules[key]


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
