"""The package layout: harness/ mirrors the workflow's stages, packages depend downward only, no
import circle anywhere, and function-local imports only defer a heavy library.

Every import of a harness module is read with `ast` (module level and inside functions alike).
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from harness import ROOT

HARNESS = ROOT / "harness"

LAYERS: list[tuple[str, ...]] = [
    ("harness", "harness.errors", "harness.io", "harness.shapes", "harness.tools", "harness.jobs", "harness.namespaces",
     "harness.runlog", "harness.baseline"),
    ("harness.launch",),
    ("harness.ops",),
    ("harness.config",),
    ("harness.gpu",),
    ("harness.build", "harness.tables"),
    ("harness.measure",),
    ("harness.report",),
    ("harness.evidence",),
    ("harness.__main__",),
]
"""Bottom to top. A module may import its own package, any module of a lower layer, and nothing
else: not a higher layer, and not a sibling package of its own layer (build and tables know
nothing of each other)."""

HEAVY = {"torch", "cupy", "triton", "numpy", "pandas", "matplotlib", "pynvml", "jinja2", "markupsafe", "sqlite_utils",
         "kernels", "cuda", "snakemake"}
"""Libraries a function may import locally, to keep them out of the import of a module that does
not always need them (a census without torch, a CPU job without CuPy, a table job without
matplotlib). Our own modules (harness.*) are always imported at module level."""


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(HARNESS.rglob("*.py"))}


def owner(module: str) -> tuple[int, str]:
    """(layer index, unit): the unit is the package that owns the module (a stage package, or the
    module itself for the shared top-level modules)."""
    best: tuple[int, str] | None = None
    for index, units in enumerate(LAYERS):
        for unit in units:
            if (module == unit or module.startswith(unit + ".")) and unit != "harness":
                if best is None or len(unit) > len(best[1]):
                    best = (index, unit)
    if best is None:
        return 0, "harness" if module == "harness" else module
    return best


def imports(path: Path, name: str) -> list[tuple[str, int, bool]]:
    """(imported harness module, line, inside a function) for every import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            local = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    out.append((alias.name, child.lineno, in_function))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                candidates = [f"{mod}.{a.name}" for a in child.names]
                found = [c for c in candidates if c in MODULES]
                out.extend((c, child.lineno, in_function) for c in found)
                if len(found) < len(candidates):
                    out.append((mod, child.lineno, in_function))
            visit(child, local)

    visit(tree, False)
    return out


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in MODULES.items():
        for target, _, _ in imports(path, name):
            if target in MODULES and target != name:
                edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    sys.setrecursionlimit(10_000)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
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
                found.append(sorted(comp))

    for v in sorted(MODULES):
        if v not in index:
            connect(v)
    return found


def test_no_import_circle() -> None:
    assert cycles(graph()) == []


def test_packages_depend_downward_only() -> None:
    wrong = []
    for name, targets in graph().items():
        layer, unit = owner(name)
        for target in targets:
            t_layer, t_unit = owner(target)
            if t_unit == unit or target == "harness" or t_unit.startswith(unit + ".") or unit.startswith(t_unit + "."):
                continue
            if t_layer > layer or (t_layer == layer and layer != 0):
                wrong.append(f"{name} -> {target}")
    assert wrong == []


DISPATCH_MAY_IMPORT = ("harness.errors", "harness.launch")
"""What an operation's dispatch (harness/ops/<op>/kernels.py) may import of ours: a baseline
revision's copy of it is loaded beside this checkout's (harness.ops.dispatch) and imports this
checkout's modules, so it leans only on the launch layer, never on its own operation's folder."""


def test_a_dispatch_imports_only_the_launch_layer() -> None:
    found = {name: sorted({t for t, _, _ in imports(path, name) if t.startswith("harness")
                           and not any(t == m or t.startswith(m + ".") for m in DISPATCH_MAY_IMPORT)})
             for name, path in MODULES.items() if re.fullmatch(r"harness\.ops\.\w+\.kernels", name)}
    assert len(found) >= 5 and not any(found.values()), found


LAZY_DISPATCH = {"harness.__main__"}
"""`python -m harness <command>` imports only the command it runs: the capture target (under nsys,
once per measurement group) must not pay for pandas, Jinja2 and matplotlib."""


def test_function_local_imports_only_defer_heavy_libraries() -> None:
    wrong = []
    for name, path in MODULES.items():
        if name in LAZY_DISPATCH:
            continue
        for target, line, local in imports(path, name):
            if local and target.split(".")[0] not in HEAVY:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target} inside a function")
    assert wrong == []


def test_the_checker_sees_a_circle_and_an_upward_arrow(tmp_path: Path) -> None:
    """The two rules above can fail: a planted circle is found, and so is an upward import."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    saved = dict(MODULES)  # cycles() walks the vertices of MODULES
    try:
        MODULES.clear()
        MODULES.update({"a": tmp_path, "b": tmp_path, "c": tmp_path})
        assert cycles(edges) == [["a", "b", "c"]]
    finally:
        MODULES.clear()
        MODULES.update(saved)
    assert owner("harness.tables.trust")[0] < owner("harness.report.render")[0]
    assert owner("harness.build.build")[0] == owner("harness.tables.derive")[0]


@pytest.mark.parametrize("package", ["launch", "ops", "gpu", "build", "measure", "tables", "report", "evidence"])
def test_every_stage_package_has_a_docstring(package: str) -> None:
    init = HARNESS / package / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text()))
    assert doc and len(doc) > 40, f"harness/{package}/__init__.py should say what the package is for"


HISTORY = [
    (re.compile(r"\bh200-[a-z0-9]+(?:-[a-z0-9]+)*-\d+\b"), "a run's namespace"),
    (re.compile(r"\b(?:since|before|after|at|of|in) (?:the sweep of )?[0-9a-f]{7,40}\b"), "a commit"),
]
"""What narrates run history: the notebooks and the evidence keep it, not the code or its config."""


def history_mentions(text: str) -> list[str]:
    return [f"{what}: {m.group(0)!r}" for pattern, what in HISTORY for m in pattern.finditer(text)]


def test_code_and_config_describe_what_is_not_how_it_came_to_be() -> None:
    paths = [*HARNESS.rglob("*.py"), *(ROOT / "workflow").rglob("*.*"), ROOT / "Snakefile", ROOT / "config.yaml",
             *(ROOT / "report" / "templates").glob("*.j2"),
             *[p for p in (ROOT / "kernels").rglob("*.*") if p.suffix in (".cu", ".py", ".ptx")]]
    found = {str(p.relative_to(ROOT)): hits for p in paths if p.is_file() and "__pycache__" not in p.parts
             for hits in [history_mentions(p.read_text(errors="replace"))] if hits}
    assert not found, f"comments that narrate history (move them to the notebook): {found}"


def test_the_history_check_sees_a_namespace_and_a_commit() -> None:
    assert history_mentions("# the default of h200-ops-2, since d50077c") == [
        "a run's namespace: 'h200-ops-2'", "a commit: 'since d50077c'"]
    assert history_mentions("namespace_prefix: h200-quick  # sha256 of every file") == []


if __name__ == "__main__":  # python tests/test_layout.py: the graph's size, for the notes
    e = graph()
    up = sum(1 for a, ts in e.items() for b in ts if owner(b)[0] > owner(a)[0])
    print(f"{len(MODULES)} modules, {sum(len(v) for v in e.values())} arrows, {up} upward, "
          f"{len(cycles(e))} circles")
