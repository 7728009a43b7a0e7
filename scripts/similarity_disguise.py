"""Disguise a Python kernel file as a student copying it would: every identifier the file
binds renamed, its statements reordered where that is legal, comments and docstrings gone.

Used by the similarity tests (tests/service/submissions/test_similarity_engine.py: a disguised
copy must still be flagged against its original) and by scripts/similarity_class.py (a
class of 300 plausible uploads to time a review). Pure ``ast``; no import of the file.

What is renamed: every name the module binds (functions, classes, parameters, assigned and
loop variables, comprehension and lambda variables), consistently everywhere, together with
the keyword arguments of calls to the module's own functions (``kernel[grid](..., BLOCK=b)``)
and string constants that spell a renamed name (``triton.Config({"BLOCK": 128})``,
``key=["n_cols"]``). Kept: imported names, attributes of other modules (``tl.load``), the
entry function the assignment requires (the upload is refused without it), dunder names.

What is reordered (legal by construction): adjacent function definitions at the module's top
level, and adjacent simple assignments in any block when neither writes a name the other
reads or writes (a data-independent pair).
"""

from __future__ import annotations

import ast
import builtins
import random
from collections.abc import Iterable

BUILTINS = frozenset(dir(builtins))


def _bound_names(tree: ast.Module) -> set[str]:
    """Every name the module binds itself (not imports)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                imported.add((alias.asname or alias.name).split(".")[0])
    return {n for n in bound - imported if not (n.startswith("__") and n.endswith("__"))}


class _Renamer(ast.NodeTransformer):
    def __init__(self, mapping: dict[str, str], own_functions: set[str]) -> None:
        self.mapping = mapping
        self.own_functions = own_functions

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self.mapping.get(node.id, node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self.mapping.get(node.arg, node.arg)
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self.mapping.get(node.name, node.name)
        node.returns = None
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815 - ast's visitor naming

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.name = self.mapping.get(node.name, node.name)
        self.generic_visit(node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        target = node.func.value if isinstance(node.func, ast.Subscript) else node.func
        if isinstance(target, ast.Name) and target.id in self.own_functions:
            for keyword in node.keywords:
                if keyword.arg is not None:
                    keyword.arg = self.mapping.get(keyword.arg, keyword.arg)
        self.generic_visit(node)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str) and node.value in self.mapping:
            node.value = self.mapping[node.value]
        return node


def _names(node: ast.AST) -> tuple[set[str], set[str]]:
    """(written, read) names of one statement."""
    written, read = set(), set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            (written if isinstance(sub.ctx, ast.Store) else read).add(sub.id)
    return written, read


def _independent(first: ast.stmt, second: ast.stmt) -> bool:
    if not all(isinstance(s, ast.Assign) and all(isinstance(t, ast.Name) for t in s.targets)
               for s in (first, second)):
        return False
    w1, r1 = _names(first)
    w2, r2 = _names(second)
    return not (w1 & w2 or w1 & r2 or w2 & r1)


def _shuffle_block(body: list[ast.stmt], rng: random.Random) -> None:
    """Swap adjacent data-independent assignments (several passes), in place."""
    for _ in range(3):
        for i in range(len(body) - 1):
            if _independent(body[i], body[i + 1]) and rng.random() < 0.7:
                body[i], body[i + 1] = body[i + 1], body[i]


def _shuffle_functions(body: list[ast.stmt], rng: random.Random) -> None:
    """Permute each run of adjacent top-level function definitions, in place."""
    i = 0
    while i < len(body):
        j = i
        while j < len(body) and isinstance(body[j], ast.FunctionDef):
            j += 1
        if j - i > 1:
            run = body[i:j]
            rng.shuffle(run)
            body[i:j] = run
        i = max(j, i + 1)


def _blocks(tree: ast.AST) -> Iterable[list[ast.stmt]]:
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def _drop_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]


def disguise(source: str, *, keep: Iterable[str], seed: int, rename: bool = True,
             reorder: bool = True) -> str:
    """`source` rewritten: identifiers renamed (all but `keep`, imports and builtins),
    statements reordered where legal, comments and docstrings dropped; deterministic for a
    `seed`. Raises SyntaxError when `source` is not Python."""
    rng = random.Random(seed)
    tree = ast.parse(source)
    _drop_docstrings(tree)
    if rename:
        names = sorted(_bound_names(tree) - set(keep) - BUILTINS)
        fresh = [f"{rng.choice('abcdefghjkmnpqrstuvwxyz')}{rng.randrange(16**4):04x}{i}"
                 for i in range(len(names))]
        rng.shuffle(fresh)
        mapping = dict(zip(names, fresh, strict=True))
        own = {n.name for n in ast.walk(tree)
               if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
        tree = _Renamer(mapping, own).visit(tree)
    if reorder:
        _shuffle_functions(tree.body, rng)
        for block in list(_blocks(tree)):
            _shuffle_block(block, rng)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"
