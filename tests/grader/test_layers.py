"""The grader's module layers, read from the source (no imports run).

- No import circle among grader's modules: each module's top-level imports (those under
  ``if TYPE_CHECKING:`` and inside functions are left out: they run after every module has
  loaded) form a graph without a cycle, so any module can be imported first; and none either
  when those deferred imports count too, so the structure reads one way in every reading.
- The packages follow one grading's path, each importing only those below it (``LAYERS``):
  the report's document at the bottom, then the sandbox and its limits, the checks and their
  verdicts, the evidence and its readers, the children of a grading; grader/runner.py and the
  command lines above them all.
- The harness files (grader/harness/*.py) are bound into the sandbox as sibling files and run
  with ``python -I``: they import each other by file name and never a ``grader`` module, which
  the child cannot see.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GRADER = ROOT / "grader"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


#: grader's packages from the bottom up: a module of one imports only from its own or those before it.
LAYERS = ("report", "sandbox", "checks", "evidence", "children")


def _every_import(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            found.extend(n for n in node.body if isinstance(n, ast.Import | ast.ImportFrom))
        elif isinstance(node, ast.Try):
            found.extend(n for n in node.body if isinstance(n, ast.Import | ast.ImportFrom))
    return found


def _graph(imports=_top_level_imports, package: Path = GRADER) -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in package.rglob("*.py") if "harness" not in path.parts}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.add(node.module)
                deps.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {dep for dep in deps if dep in modules and dep != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(graph[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_grader_has_no_import_circle():
    graph = _graph()
    assert {"grader.runner", "grader.children.check_children", "grader.checks.verdicts", "grader.sandbox.run",
            "grader.sandbox.progress", "grader.sandbox.child_limits", "grader.benchmark"} <= set(graph)
    assert _cycles(graph) == [], _cycles(graph)


def test_no_circle_even_counting_deferred_imports():
    graph = _graph(_every_import)
    assert _cycles(graph) == [], _cycles(graph)


def test_the_service_has_no_import_circle_even_counting_deferred_imports():
    """submissions/ and api/ as grader/: an assignment's settings no longer re-derive slip days
    themselves (service.update_assignment does), and the LMS's commands take their transaction
    from submissions/cli_transaction.py, not from the command line that dispatches to them."""
    known = {"submissions": {"submissions.assignments", "submissions.grades", "submissions.slip_days",
                             "submissions.cli", "submissions.lti.cli"},
             "api": {"api.main", "api.routes.assignments", "api.pages.routes.staff"}}
    for package, modules in known.items():
        graph = _graph(_every_import, ROOT / package)
        assert modules <= set(graph)
        assert _cycles(graph) == [], (package, _cycles(graph))


def test_each_package_imports_only_the_layers_below_it():
    def layer(module: str) -> int | None:
        parts = module.split(".")
        return LAYERS.index(parts[1]) if len(parts) > 2 and parts[1] in LAYERS else None

    upward = [f"{module} -> {dep}" for module, deps in sorted(_graph(_every_import).items()) for dep in sorted(deps)
              if layer(module) is not None and layer(dep) is not None and layer(dep) > layer(module)]
    assert upward == []
    assert {path.name for path in GRADER.iterdir() if path.is_dir() and (path / "__init__.py").exists()} >= set(LAYERS)


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_harness_files_import_no_grader_module():
    offenders = []
    for path in sorted((GRADER / "harness").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            offenders += [f"{path.name}: {name}" for name in names if name.split(".")[0] in {"grader", "api", "submissions"}]
    assert offenders == []
