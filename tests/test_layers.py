"""The layout cannot rot: imports point down the layers only, and no modules import each
other in a circle (STYLE.md, "The layout to grow into"; docs/design.md, "Layers").

Read from the source with ast, so a lazy import inside a function counts like one at the
top. Imports under `if TYPE_CHECKING:` do not: they name types, they load nothing.
"""

from __future__ import annotations

import ast
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(__file__), "..", "ctape")

# Bottom first. A module may import its own layer and the ones below, never one above.
LAYERS = [
    "model",  # values and canonical bytes
    "store",  # bytes on disk
    "history",  # what the bytes mean
    "ops",  # one module per verb over the history
    "api",  # ctape.Tape, ctape.Session, ctape.errors: the history with the verbs of ops
    "sync",  # moving tapes between places: remotes (push, pull, clone)
    "formats",
    "integrations",
    "watch",
    "web",
    "cli",
    "top",  # the package itself, `python -m ctape` (and ctape.web), the CLI reference
]
ROOT_MODULES = {"tape": "api", "session": "api", "errors": "api", "clidoc": "top"}


def layer_of(module: str) -> str:
    parts = module.split(".")[1:]  # without "ctape"
    if not parts or parts[-1] == "__main__":  # `python -m ctape.web` is an entry point, like `ctape`
        return "top"
    if len(parts) == 1 and parts[0] in ROOT_MODULES:
        return ROOT_MODULES[parts[0]]
    if parts[0] in LAYERS:
        return parts[0]
    raise AssertionError(f"ctape/{'/'.join(parts)}.py is in no layer: put it in a package of LAYERS (or name it in ROOT_MODULES)")


def source_modules() -> dict[str, str]:
    out = {}
    for folder, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, os.path.join(PACKAGE, ".."))[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = path
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                for sub in ast.walk(inner):
                    skip.add(id(sub))
    return skip


def imports(modules: dict[str, str]) -> dict[str, set[str]]:
    """module -> the ctape modules it imports at run time (a package counts as its __init__)."""
    graph = {}
    for module, path in modules.items():
        is_package = path.endswith("__init__.py")
        here = module if is_package else module.rsplit(".", 1)[0]
        tree = ast.parse(open(path, encoding="utf-8").read())
        skip = _type_checking_only(tree)
        found = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")
                    base = ".".join(base[: len(base) - node.level + 1])
                    target = f"{base}.{node.module}" if node.module else base
                else:
                    target = node.module or ""
                for alias in node.names:
                    name = f"{target}.{alias.name}"
                    found.add(name if name in modules else target)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[module] = {m for m in found if m in modules and m != module}
    return graph


def test_every_module_is_in_a_layer_and_every_package_says_what_it_owns():
    for module, path in source_modules().items():
        layer_of(module)
        if path.endswith("__init__.py") and module.count(".") == 1:
            doc = ast.get_docstring(ast.parse(open(path, encoding="utf-8").read()))
            assert doc and len(doc) > 80, f"{path}: say in one paragraph what the package owns"


def test_imports_point_down():
    graph = imports(source_modules())
    upward = []
    for module, targets in sorted(graph.items()):
        mine = LAYERS.index(layer_of(module))
        for target in sorted(targets):
            if LAYERS.index(layer_of(target)) > mine:
                upward.append(f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})")
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    found = cycles(imports(source_modules()))
    assert not found, "modules that import each other in a circle:\n" + "\n".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("graph,expected", [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
])
def test_the_circle_finder_finds_circles(graph, expected):
    assert cycles(graph) == expected
