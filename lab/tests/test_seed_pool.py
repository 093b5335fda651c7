"""lab/experiments/seed_pool.py: a recipe's gain over the base model across seeds, per seed and pooled on the same
games, from the leaderboard's own result files."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from spy_env.heldout import paired_difference
from tests.helpers import experiment_module

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = [ROOT / "lab" / "results" / "selfplay" / folder for folder in ("attempt23", "attempt24", "audit")]


@pytest.fixture(scope="module")
def seed_pool():
    return experiment_module("seed_pool")


def _spy(tmp_path: Path, name: str, survived: list[int], violations: dict[int, list[str]] | None = None) -> Path:
    items = [
        {"document_id": f"d{i}", "game_seed": i, "survival_rate": float(s), "violations": (violations or {}).get(i, [])}
        for i, s in enumerate(survived)
    ]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"model": name, "results": {"spy-v1": {"items": items}}}), encoding="utf-8")
    return path


def test_per_seed_gains_are_the_paired_differences_and_the_pool_is_their_mean(seed_pool, tmp_path, capsys):
    base = _spy(tmp_path, "base", [0, 0, 1, 0, 0, 1, 0, 0])
    runs = [
        _spy(tmp_path, "s0", [1, 1, 1, 0, 1, 1, 0, 1], {0: ["verbatim_copy"]}),
        _spy(tmp_path, "s1", [0, 1, 1, 0, 0, 1, 0, 0]),
        _spy(tmp_path, "s2", [0, 0, 0, 0, 1, 1, 1, 0]),
    ]
    out = tmp_path / "pool.json"
    assert seed_pool.main(["--base", str(base), "--seeds", *map(str, runs), "--out", str(out)]) == 0
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["set"] == "spy-v1" and record["seeds"] == [str(r) for r in runs] and record["references"] is None
    survival = record["scores"]["survival_rate"]
    _, base_games = seed_pool.games_of(json.loads(base.read_text(encoding="utf-8")))
    games = [seed_pool.games_of(json.loads(r.read_text(encoding="utf-8")))[1] for r in runs]
    each = [paired_difference(g, base_games, "survival_rate").to_dict() for g in games]
    assert survival["per_seed"] == each
    assert [d["mean"] for d in each] == [0.5, 0.125, 0.125]
    assert survival["games"]["mean"] == survival["seeds_and_games"]["mean"] == pytest.approx(0.25)
    # the two-level interval also draws the seeds, which disagree here: it is at least as wide
    width = {k: survival[k]["high"] - survival[k]["low"] for k in ("games", "seeds_and_games")}
    assert width["seeds_and_games"] >= width["games"] > 0
    # the pasted copy of seed 0's first game survived, and counts as caught in clean survival
    assert record["scores"]["clean_survival_rate"]["per_seed"][0]["mean"] == pytest.approx(0.375)
    assert "| survival_rate | 0.250 | +0.500" in capsys.readouterr().out


def test_files_that_cannot_be_pooled_are_one_error_line(seed_pool, tmp_path, capsys):
    base = _spy(tmp_path, "base", [0, 1, 0])
    other_games = _spy(tmp_path, "short", [1, 1])
    detect = tmp_path / "detect.json"
    item = {"document_id": "d0", "game_seed": 0, "detection_accuracy": 1.0, "expected_accuracy": 0.5}
    detect.write_text(json.dumps({"results": {"detect-v1": {"items": [item]}}}), encoding="utf-8")
    empty = tmp_path / "empty.json"
    empty.write_text("", encoding="utf-8")
    for seeds in ([other_games], [detect], [empty], [tmp_path / "missing.json"]):
        assert (
            seed_pool.main(["--base", str(base), "--seeds", *map(str, seeds), "--out", str(tmp_path / "o.json")]) == 2
        )
        assert capsys.readouterr().err.startswith("error:")
    one_reference = ["--references", str(base), "--seeds", str(base), str(base), "--out", str(tmp_path / "o.json")]
    assert seed_pool.main(one_reference) == 2 and "one per seed" in capsys.readouterr().err
    out = tmp_path / "kept.json"
    assert seed_pool.main(["--base", str(base), "--seeds", str(base), "--out", str(out)]) == 0
    assert seed_pool.main(["--base", str(base), "--seeds", str(base), "--out", str(out)]) == 2  # no silent overwrite


def test_references_pair_each_seed_with_its_own(seed_pool, tmp_path):
    refs = [_spy(tmp_path, "r0", [0, 0, 0, 0]), _spy(tmp_path, "r1", [1, 1, 1, 1])]
    runs = [_spy(tmp_path, "s0", [1, 1, 0, 0]), _spy(tmp_path, "s1", [1, 1, 1, 1])]
    out = tmp_path / "pool.json"
    assert seed_pool.main(["--references", *map(str, refs), "--seeds", *map(str, runs), "--out", str(out)]) == 0
    survival = json.loads(out.read_text(encoding="utf-8"))["scores"]["survival_rate"]
    assert [d["mean"] for d in survival["per_seed"]] == [0.5, 0.0]  # each seed against its own reference
    assert survival["base"]["mean"] == 0.5 and survival["games"]["mean"] == 0.25


def test_committed_pools_are_the_committed_leaderboard_files(seed_pool, tmp_path):
    """Each committed pool is what the script makes from the leaderboard files it names."""
    pools = sorted(path for folder in COMMITTED for path in folder.glob("pool_*.json"))
    assert {path.parent.name for path in pools} == {"attempt23", "attempt24", "audit"}
    for path in pools:
        committed = json.loads(path.read_text(encoding="utf-8"))
        words = shlex.split(committed["command"])  # python lab/experiments/seed_pool.py ARGS --out PATH
        assert words[:2] == ["python", "lab/experiments/seed_pool.py"] and words[-2:] == [
            "--out",
            str(path.relative_to(ROOT)),
        ]
        out = tmp_path / path.name
        argv = [str(ROOT / w) if (ROOT / w).is_file() else w for w in words[2:-2]]
        assert seed_pool.main([*argv, "--out", str(out)]) == 0
        assert json.loads(out.read_text(encoding="utf-8"))["scores"] == committed["scores"]


def test_the_pooled_intervals_docstring_examples_hold(seed_pool):
    """The docstring's examples, the clustered interval's included (lab scripts are not collected as doctests)."""
    import doctest

    result = doctest.testmod(seed_pool)
    assert result.attempted >= 9 and result.failed == 0
