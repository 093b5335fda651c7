"""docs/ARCHITECTURE.md's one-way doors and size limits, checked on the source.

- ``spy_env`` imports none of ``agents``, ``trainers``, ``spyrl``; ``agents`` imports neither
  ``trainers`` nor ``spyrl``; ``trainers`` does not import ``spyrl``.
- No function outside tests is longer than 60 lines; no module in ``trainers/`` over 400 lines.
- Stages are compared through ``spy_env.Stage`` (no bare 0/1), and policies are not probed with
  ``hasattr`` (they declare ``spy_env.policy.RolloutPolicy``).
- Every file path docs/ARCHITECTURE.md names exists.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("spy_env", "agents", "trainers", "spyrl")
FORBIDDEN = {
    "spy_env": {"agents", "trainers", "spyrl"},
    "agents": {"trainers", "spyrl"},
    "trainers": {"spyrl"},
    "spyrl": set(),
}
CODE = [
    p for folder in (*PACKAGES, "benchmarks", "experiments", "examples") for p in sorted((ROOT / folder).rglob("*.py"))
]


def imported_packages(path: Path) -> set[str]:
    """Top-level packages a module imports, anywhere in it (lazy imports inside functions too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_only_go_through_the_one_way_doors(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_functions_and_trainer_modules_stay_short():
    long = []
    for path in CODE:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []
    big = {p.name: n for p in (ROOT / "trainers").glob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert big == {}


def test_no_bare_stage_numbers_and_no_policy_probes():
    stage_literal = re.compile(
        r"""stage["']?\]?\)?\s*(==|!=)\s*[01]\b|\["stage"\]\s*(==|!=)\s*["'](vote|perform|detect)"""
    )
    probe = re.compile(r"hasattr\((self\.)?(policy|engine|learner|performer|voter)\b")
    found = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
        for path in CODE
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if stage_literal.search(line) or probe.search(line)
    ]
    assert found == []


def test_architecture_doc_names_only_real_files():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:spy_env|agents|trainers|spyrl|tests|benchmarks|examples|docs)/[\w/.-]+)`", text))
    assert paths, "the doc names no files"
    assert sorted(p for p in paths if not (ROOT / p).exists()) == []


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Which package modules each package module imports, anywhere in it (function-level imports
    too). ``from a import b`` names the module ``a.b`` when it is one, else ``a``."""
    paths = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    modules = {module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in modules)
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the module's package, up level - 1 packages
                    base = name.split(".")[: len(name.split(".")) - node.level + is_package]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                for alias in node.names:
                    if f"{target}.{alias.name}" in modules:
                        edges.add(f"{target}.{alias.name}")
                    elif target in modules:
                        edges.add(target)
        edges.discard(name)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                circles.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_the_graph_sees_a_circle():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = import_graph()
    assert "agents.decoding" in graph["agents.hf"], "the import graph misses a plain import"


def test_no_import_circle_among_package_modules():
    """A circle works only through import order and lazy imports; each module should read on its
    own, so the modules of the packages form a directed acyclic graph (package ``__init__``
    re-exports included, their implicit parent import not)."""
    assert import_circles(import_graph()) == []


def test_no_config_field_is_held_by_two_configs():
    """One owner per setting: a field in both GameConfig and SpyRLConfig means one copy silently wins
    (``train_spy_vote`` did) or one name means two things (``beta`` did). Nothing has been released,
    so no field is kept as a deprecated alias either."""
    from dataclasses import fields

    from spy_env.config import GameConfig
    from trainers.config import SpyRLConfig

    game = {f.name for f in fields(GameConfig)}
    trainer = {f.name for f in fields(SpyRLConfig)}
    assert game & trainer == set()
    helps = {f"{c.__name__}.{f.name}": f.metadata["help"] for c in (GameConfig, SpyRLConfig) for f in fields(c)}
    assert [name for name, text in helps.items() if "deprecated" in text.lower()] == []


MAX_PARAMETERS = 8


def test_no_function_takes_more_than_eight_parameters():
    """Concepts travel as records: a function of the packages takes at most 8 named parameters
    (``self``/``cls`` and ``*args``/``**kwargs`` not counted)."""
    wide = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
                    names = names[1:] if names[:1] in (["self"], ["cls"]) else names
                    if len(names) > MAX_PARAMETERS:
                        wide.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert wide == []
