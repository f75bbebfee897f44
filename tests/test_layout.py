"""The package's import graph, read from the source (every ``import``, including those under
``TYPE_CHECKING`` and inside functions): no circle anywhere, and no arrow from a lower room up to a
higher one (``inputs/`` is the ground floor: it imports nothing else of transferdx)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "transferdx"
DESIGN = PACKAGE.parent / "docs" / "design.md"

# The ground floor: ``inputs/`` imports only itself and the leaf utilities below it.
GROUND = "transferdx.inputs"
# Leaf utilities (hashing, atomic writes, notebook display): they import no other transferdx module (tested).
LEAVES = {"transferdx.artifacts", "transferdx.display"}


def module_names(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package, dotted name → file (a package is its ``__init__``)."""
    out = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The transferdx modules that ``name`` imports (``from a import b`` counts as a.b when a.b is a
    module, else as a)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    return {m for m in found if m in modules and m != name}


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    modules = module_names(package)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_graph_reader_sees_relative_type_only_and_local_imports(tmp_path):
    """A made-up package: a type-only import, a function-local one, a relative one and a
    ``from package import module`` all give an edge, and a two-module circle is found."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.a import f\n")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.b import B\ndef f():\n    return 1\n"
    )
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def g():\n    from . import c\n    return c\nclass B: ...\n")
    (pkg / "sub" / "c.py").write_text("from ..a import f\nfrom pkg import sub\n")
    edges = graph(pkg)
    assert edges == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.sub.b"},
        "pkg.sub": set(),
        "pkg.sub.b": {"pkg.sub.c"},
        "pkg.sub.c": {"pkg.a", "pkg.sub"},
    }
    assert cycles(edges) == [["pkg.a", "pkg.sub.b", "pkg.sub.c"]]


def test_no_import_circle_anywhere():
    assert cycles(graph()) == []


def test_inputs_import_nothing_above_them():
    upward = {
        (name, target)
        for name, targets in graph().items()
        if name == GROUND or name.startswith(GROUND + ".")
        for target in targets
        if not (target == GROUND or target.startswith(GROUND + ".") or target in LEAVES)
    }
    assert upward == set(), sorted(upward)


def test_leaf_utilities_import_no_transferdx_module():
    edges = graph()
    assert {leaf: edges[leaf] for leaf in LEAVES} == {leaf: set() for leaf in LEAVES}


# The CLI edge: the only modules that import Hydra or OmegaConf (docs/design.md §6).
HYDRA_EDGE = {"transferdx.config", "transferdx.cli", "transferdx.cli_help", "transferdx.cli_shards", "transferdx.runs"}


def third_party_imports(path: Path) -> set[str]:
    """The top-level names of every package ``path`` imports (absolute imports only)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_cli_edge_imports_hydra():
    users = {name for name, path in module_names().items() if third_party_imports(path) & {"hydra", "omegaconf"}}
    assert users == HYDRA_EDGE, sorted(users ^ HYDRA_EDGE)


def test_inputs_import_only_the_leaves_outside_themselves():
    """What docs/design.md §6 says ``inputs/`` imports: itself, ``artifacts`` and ``display``."""
    outside = {t for n, ts in graph().items() if n.startswith(GROUND) for t in ts if not t.startswith(GROUND)}
    assert outside == LEAVES, sorted(outside)


def test_no_public_function_or_class_defined_twice():
    """A public function or class name has one home in the package (constants may repeat a word)."""
    homes: dict[str, list[str]] = {}
    for name, path in module_names().items():
        if path.name == "__init__.py":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_"):
                homes.setdefault(node.name, []).append(name)
    twice = {n: sorted(m) for n, m in homes.items() if len(m) > 1}
    assert twice == {}, twice


def drawn_modules(design: str) -> set[str]:
    """The modules the layout drawing of docs/design.md §6 names, as paths under ``transferdx/``: a
    line indented two spaces starts an entry (``name.py`` a module, ``name/`` a folder); every
    ``word.py`` (or ``sub/word.py``) on the entry's lines is a module of that folder (of the package
    itself for a module entry)."""
    section = design[design.index("## 6. Layout") :]
    start = section.index("```\ntransferdx/\n") + len("```\ntransferdx/\n")
    block = section[start : section.index("\n```", start)]
    named: set[str] = set()
    folder = ""
    for line in block.splitlines():
        if not line.startswith("  "):
            break  # the repository's other folders
        if not line.startswith("   "):  # an entry
            head = line.split()[0]
            folder = head if head.endswith("/") else ""
        named.update(folder + m for m in re.findall(r"\b([\w/]+\.py)\b", line))
    return named


def test_drawn_modules_reader_on_a_made_up_drawing():
    drawing = (
        "## 6. Layout\n```\ntransferdx/\n  a.py  one (like b.py)\n  sub/  x.py  y.py\n"
        "                   z.py (beside x.py), deeper/w.py\n  c.py\nconf/  d.py\n```\n"
    )
    assert drawn_modules(drawing) == {"a.py", "b.py", "sub/x.py", "sub/y.py", "sub/z.py", "sub/deeper/w.py", "c.py"}


def test_the_layout_drawing_names_every_module_and_only_modules_that_exist():
    """docs/design.md §6 stays true: each module under ``transferdx/`` (a package's ``__init__``
    aside) is named under its folder, and each module named there exists."""
    present = {
        str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent == PACKAGE
    }
    named = drawn_modules(DESIGN.read_text(encoding="utf-8"))
    assert sorted(present - named) == [], "modules the layout does not name"
    assert sorted(named - present) == [], "modules the layout names that do not exist"
