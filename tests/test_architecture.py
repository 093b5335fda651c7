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
