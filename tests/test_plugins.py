"""An installed package's operator reaches every ``spyrl`` command through the ``spyrl.plugins`` entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LOUD = textwrap.dedent(
    """
    from spy_env.degrade import Degraded, Span, register_degrader


    @register_degrader("loud")
    def loud(text, rng, ctx):
        return Degraded(text.upper(), (Span(0, len(text), text, text.upper()),), "loud")
    """
)


def _install(site: Path, name: str, module: str, source: str | None) -> None:
    """A package as pip leaves it: its module, and a dist-info folder declaring the entry point."""
    if source is not None:
        (site / module).mkdir(parents=True)
        (site / module / "__init__.py").write_text(source)
    dist = site / f"{name}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[spyrl.plugins]\n{name} = {module}\n")


def _spyrl(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "COLUMNS": "160"}
    return subprocess.run(
        [sys.executable, "-m", "spyrl", *args], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT
    )


def test_an_installed_operator_is_a_choice_of_the_cli_and_named_in_the_rows(tmp_path):
    site = tmp_path / "site"
    _install(site, "loud_ops", "loud_ops", LOUD)
    out = tmp_path / "game.jsonl"
    proc = _spyrl(site, "play", "--agent", "heuristic", "--players", "3", "--degrade", "loud", "--seed", "1",
                  "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and {r["degrade"] for r in rows} == {"loud"}
    spy = next(r for r in rows if r["seat"] == r["spy_seat"] and r["stage"] == "perform")
    copy = spy["prompt"][-1]["content"].split("<document>\n")[1].split("\n</document>")[0]
    assert copy == copy.upper()  # the package's operator made the spy's copy
    # without the package the same command refuses the name, as argparse refuses any unknown choice
    bare = _spyrl(tmp_path / "empty", "play", "--players", "3", "--degrade", "loud")
    assert bare.returncode == 2 and "invalid choice: 'loud'" in bare.stderr


def test_a_plugin_that_fails_to_import_is_one_error_line(tmp_path):
    site = tmp_path / "site"
    _install(site, "broken_ops", "broken_ops", "raise RuntimeError('this plugin is broken')\n")
    proc = _spyrl(site, "play", "--players", "3")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error:") and "'broken_ops'" in line and "this plugin is broken" in line
