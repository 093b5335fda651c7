"""lab/experiments/spy_texts.py: spy-v1 survival with the game's violations counted as caught, paired with the
first result file, from the leaderboard's own result files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import experiment_module

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "lab" / "results" / "selfplay" / "attempt8"


@pytest.fixture(scope="module")
def spy_texts():
    return experiment_module("spy_texts")


def _result(tmp_path: Path, name: str, games: list[tuple[float, list[str], str]]) -> Path:
    items = [
        {"document_id": f"d{i}", "game_seed": i, "survival_rate": s, "violations": v, "completion": text}
        for i, (s, v, text) in enumerate(games)
    ]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"model": name, "results": {"spy-v1": {"items": items}}}), encoding="utf-8")
    return path


def test_a_violation_counts_as_caught_and_every_score_is_paired_with_the_first_file(spy_texts, tmp_path, capsys):
    base = _result(tmp_path, "base", [(0.0, [], "x = 2"), (1.0, [], "4 apples"), (0.0, [], "no number")])
    trained = _result(
        tmp_path,
        "trained",
        [(1.0, ["verbatim_copy"], "The source text: <document> 2"), (1.0, [], "4 apples"), (1.0, [], "none")],
    )
    out = tmp_path / "texts.json"
    assert spy_texts.main([str(base), str(trained), "--out", str(out)]) == 0
    rows = json.loads(out.read_text(encoding="utf-8"))["models"]
    assert [r["file"] for r in rows] == ["base.json", "trained.json"] and "difference" not in rows[0]["survival_rate"]
    after = rows[1]
    assert after["survival_rate"]["mean"] == 1.0 and after["survival_rate"]["difference"]["mean"] == pytest.approx(
        2 / 3
    )
    # the pasted copy survived, but broke a rule of the game: caught
    assert after["clean_survival_rate"]["mean"] == pytest.approx(2 / 3)
    assert after["clean_survival_rate"]["difference"]["mean"] == pytest.approx(1 / 3)
    assert after["violation_rate"]["mean"] == after["quotes_source_rate"]["mean"] == pytest.approx(1 / 3)
    assert after["survival_with_numbers"]["n"] == 2 and after["survival_without_numbers"]["n"] == 1
    assert "| trained.json | 1.000" in capsys.readouterr().out
    assert spy_texts.main([str(base), str(trained), "--out", str(out)]) == 2  # no silent overwrite
    other = _result(tmp_path, "other", [(1.0, [], "1")])
    assert spy_texts.main([str(base), str(other), "--out", str(tmp_path / "o.json")]) == 2  # not the same games
    assert "error:" in capsys.readouterr().err


def test_committed_spy_text_summary_is_the_leaderboard_files(spy_texts, tmp_path):
    """The committed summary is what the script makes from the committed leaderboard files, and its survival
    is the leaderboard's own score."""
    committed = json.loads((COMMITTED / "spy_texts.json").read_text(encoding="utf-8"))
    files = [COMMITTED / "leaderboard" / r["file"] for r in committed["models"]]
    out = tmp_path / "again.json"
    assert spy_texts.main([*map(str, files), "--out", str(out)]) == 0
    assert json.loads(out.read_text(encoding="utf-8"))["models"] == committed["models"]
    for row, path in zip(committed["models"], files, strict=True):
        board = json.loads(path.read_text(encoding="utf-8"))["results"]["spy-v1"]
        assert row["survival_rate"]["mean"] == pytest.approx(board["accuracy"])
