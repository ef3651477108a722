"""The package's import graph: no import runs from a lower layer to a higher one, and no cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "adwm"


def layer_order() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```layers block"
    return block.group(1).split()


def layer_of(module: str) -> str:
    """`adwm.stages.fit` -> `stages`; `adwm.cli` -> `cli`."""
    return module.split(".")[1]


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every `adwm` import in a file, at any depth (function-level imports count)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out += [(node.lineno, n) for n in names if n.startswith("adwm.")]
    return out


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_package_has_a_layer():
    order = layer_order()
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    modules = {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    assert packages | modules == set(order), "docs/architecture.md must list every top-level package and module"


def test_no_module_imports_a_higher_layer():
    rank = {name: k for k, name in enumerate(layer_order())}
    upward = []
    for path in SRC.rglob("*.py"):
        me = module_name(path)
        if me == "adwm":
            continue
        for line, target in imports(path):
            if rank[layer_of(target)] > rank[layer_of(me)]:
                upward.append(f"{path.relative_to(ROOT)}:{line}: {me} imports {target}")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_the_module_import_graph_has_no_cycle():
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        graph[module_name(path)] = {t for _, t in imports(path)}
    known = set(graph)

    def resolve(target: str) -> str | None:  # `from adwm.x import y` names a module or an object in one
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    edges = {
        m: {r for t in ts if (r := resolve(t)) and r != m and not m.startswith(r + ".")} for m, ts in graph.items()
    }
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                cycle = stack[stack.index(n) :] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)


def test_the_checker_sees_an_upward_import(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from adwm.stages.fit import fit\n")
    assert imports(src) == [(2, "adwm.stages.fit")]
