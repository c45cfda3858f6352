"""The package's import graph, read from the source: one statement of the layers
(docs/architecture.md, equal to `.importlinter`'s), no import circle between two modules, no
import of the package root, and each exception `.importlinter` lists an annotation-only one.

`lint-imports` checks the layers themselves; a circle inside one package (two config modules
importing each other) is no layer's business, so it is found here, with every import counted:
at module level, in a function body, under `if TYPE_CHECKING:`, and a package that imports its
own modules by name (pkgutil) as importing all of them.
"""

from __future__ import annotations

import ast
import configparser
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "abtest"


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    #: under `if TYPE_CHECKING:`: a name for annotations, never run
    typing_only: bool


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _typing_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def _imports(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    text = path.read_text()
    tree = ast.parse(text)
    typing = _typing_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[Import] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
            line = node.lineno
        elif isinstance(node, ast.ImportFrom):
            line = node.lineno
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            # `from pkg import mod` imports the module pkg.mod; `from mod import name`, mod
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        for name in names:
            target = known(name)
            if target and target != module:
                out.append(Import(module, target, line, line in typing))
    if path.name == "__init__.py" and "pkgutil.iter_modules(__path__)" in text:
        out += [Import(module, m, 0, False) for m in modules if m.rpartition(".")[0] == module]
    return out


def _graph() -> list[Import]:
    modules = _modules()
    return [i for m, p in sorted(modules.items()) for i in _imports(m, p, modules)]


def _circles(imports: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    edges: dict[str, set[str]] = {}
    for i in imports:
        edges.setdefault(i.source, set()).add(i.target)
        edges.setdefault(i.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        part.append(top)
                        if top == node:
                            break
                    if len(part) > 1:
                        found.append(sorted(part))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def _linter() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return config


def _lines(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if line.strip()]


def test_the_layers_are_written_once() -> None:
    """docs/architecture.md's list is `.importlinter`'s, line for line, and every package of
    abtest (but the fakes for tests) stands in it."""
    stated = _lines(_linter()["importlinter:contract:layers"]["layers"])
    doc = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"```\n(abtest\.cli\n.*?)```", doc, re.S)
    assert block is not None, "docs/architecture.md has no layer list"
    assert _lines(block.group(1)) == stated
    named = {p.strip() for line in stated for p in line.split("|")}
    tops = {m.split(".")[1] for m in _modules() if m.count(".") >= 1}
    missing = {f"abtest.{t}" for t in tops} - named - {"abtest.testing", "abtest.__main__"}
    assert not missing, f"packages in no layer: {sorted(missing)}"


def test_no_import_circle() -> None:
    circles = _circles(_graph())
    assert not circles, "modules that import each other (through any path): " + "; ".join(
        " <-> ".join(c) for c in circles
    )


def test_the_circle_finder_finds_one() -> None:
    a_b = [Import("a", "b", 1, False), Import("b", "c", 1, True), Import("c", "a", 1, False)]
    assert _circles(a_b) == [["a", "b", "c"]]
    assert _circles(a_b[:2]) == []


def test_no_module_imports_the_package_root() -> None:
    """The root is the results API's front door; what every layer needs of it (the version)
    is in abtest.process, beneath them."""
    up = [f"{i.source}:{i.line}" for i in _graph() if i.target == "abtest"]
    assert not up


def test_each_exception_is_for_annotations_only() -> None:
    config = _linter()
    graph = _graph()
    exceptions = [
        line
        for section in config.sections()
        for line in _lines(config[section].get("ignore_imports", ""))
    ]
    assert exceptions  # the parse found them
    for exception in exceptions:
        source, target = (s.strip() for s in exception.split("->"))
        found = [i for i in graph if i.source == source and i.target == target]
        assert found, f"{exception}: no such import (drop the exception)"
        assert all(i.typing_only for i in found), f"{exception} runs: it is no annotation"
