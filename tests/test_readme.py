"""The README's quick start runs as written, and its commands match .ci/run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_quick_start_runs(capsys):
    code = re.findall(r"```python\n(.*?)```", README, re.S)[0]
    exec(compile(code, "README.md", "exec"), {})
    assert "spy_seat" in capsys.readouterr().out


def test_ci_runs_the_readme_test_command():
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    test_command = next(b.strip() for b in blocks if "pytest" in b)
    assert test_command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_agents_table_is_the_backend_registry():
    import agents

    section = README.split("## Agents\n", 1)[1]
    table = re.search(r"^\| spec \| what \|\n(?:\|.*\n)+", section, re.M).group(0).rstrip("\n")
    assert table == agents.backends_table(), "regenerate README's agents table from agents.backends_table()"
