"""The evaluation ledger: every scoring path appends one look, where the rules say, never through a link;
``spyrl ledger`` counts the looks per set."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

import agents
from spy_env.config import GameConfig
from spy_env.corpus import load_embedded, split_documents
from spy_env.heldout import evaluate_heldout
from spy_env.ledger import (
    LedgerEntry,
    Look,
    append_entry,
    headline,
    ledger_path,
    looks,
    read_ledger,
    recipe_hash,
    set_looks,
)
from spyrl.commands import main
from spyrl.evaluation.leaderboard import RELEASED_SHA256, run_leaderboard

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ["time", "set", "set_sha256", "model", "recipe", "result", "command", "preregistration"]


def _entry(set_name: str = "detect-v1", model: str = "heuristic", **fields) -> LedgerEntry:
    result = headline("detection_accuracy", 0.5, 0.25, 0.75, 8)
    return LedgerEntry(set_name, "ab" * 32, model, recipe_hash(model), result, **fields)


# ------------------------------------------------------------------------ the file
def test_a_look_is_one_json_line_with_every_field(tmp_path):
    path = tmp_path / "l.jsonl"
    append_entry(_entry(command=["spyrl", "leaderboard", "detect"]), path)
    append_entry(_entry("gsm8k", preregistration={"path": "plan.json", "commit": "c" * 40}), path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert list(first) == FIELDS
    assert datetime.fromisoformat(first["time"]).utcoffset() == timezone.utc.utcoffset(None)
    assert first["result"] == {"metric": "detection_accuracy", "mean": 0.5, "low": 0.25, "high": 0.75, "n": 8}
    assert first["command"] == ["spyrl", "leaderboard", "detect"] and first["preregistration"] is None
    assert second["preregistration"] == {"path": "plan.json", "commit": "c" * 40} and second["command"] is None
    assert read_ledger(path) == [first, second]


def test_nan_scores_are_written_as_null_so_every_line_is_strict_json(tmp_path):
    path = tmp_path / "l.jsonl"
    entry = LedgerEntry("s", "0" * 64, "m", "r", headline("expected_accuracy", *[float("nan")] * 3, 0))
    append_entry(entry, path)
    assert "NaN" not in path.read_text() and read_ledger(path)[0]["result"]["mean"] is None


def test_where_the_ledger_goes(tmp_path, monkeypatch):
    monkeypatch.setenv("SPYRL_LEDGER", str(tmp_path / "env.jsonl"))
    assert ledger_path(tmp_path / "given.jsonl") == tmp_path / "given.jsonl"  # explicit first
    assert ledger_path() == ledger_path(None) == tmp_path / "env.jsonl"  # then SPYRL_LEDGER
    monkeypatch.delenv("SPYRL_LEDGER")
    monkeypatch.setenv("SPYRL_CACHE", str(tmp_path / "cache"))
    assert ledger_path() == tmp_path / "cache" / "ledger.jsonl"  # then the cache folder
    monkeypatch.delenv("SPYRL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ledger_path() == tmp_path / "xdg" / "spyrl" / "ledger.jsonl"
    for off in ("off", "OFF"):
        monkeypatch.setenv("SPYRL_LEDGER", off)
        assert ledger_path() is None and append_entry(_entry()) is None
    assert ledger_path(False) is None and ledger_path("off") is None
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "cache").exists()  # off wrote nothing


@pytest.mark.parametrize("kind", ["link", "dangling link", "folder", "fifo"])
def test_a_ledger_that_is_not_a_regular_file_of_its_own_is_refused(tmp_path, kind):
    path, target = tmp_path / "ledger.jsonl", tmp_path / "elsewhere.jsonl"
    if kind == "link":
        target.write_text("")
        path.symlink_to(target)
    elif kind == "dangling link":
        path.symlink_to(target)
    elif kind == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)
    with pytest.raises(ValueError, match="ledger"):
        ledger_path(path)
    with pytest.raises(ValueError, match="ledger"):
        append_entry(_entry(), path)
    assert not target.exists() or target.read_text() == ""  # nothing written through the link


def test_reading_refuses_a_line_that_is_not_a_look_and_counts_looks_per_set(tmp_path):
    path = tmp_path / "l.jsonl"
    for entry in (_entry(), _entry(model="random"), _entry(), _entry("gsm8k")):
        append_entry(entry, path)
    entries = read_ledger(path)
    assert looks(entries) == {"detect-v1": 3, "gsm8k": 1}
    detect = set_looks(entries)[0]
    assert (detect.set, detect.looks, detect.models) == ("detect-v1", 3, 2)
    assert detect.first == entries[0]["time"] and detect.last == entries[2]["time"]
    with path.open("a") as f:
        f.write('{"set": "detect-v1"}\n')
    with pytest.raises(ValueError, match="line 5 is not a look"):
        read_ledger(path)
    path.write_text("not json\n")
    with pytest.raises(ValueError, match="line 1 is not JSON"):
        read_ledger(path)
    path.write_bytes(b"x" * (2 << 20))
    with pytest.raises(ValueError, match="line 1 is longer than"):
        read_ledger(path)


def test_the_recipe_of_a_checkpoint_is_its_training_config(tmp_path):
    """A checkpoint's ``model/`` folder and the checkpoint folder give the hash of the config its
    ``trainer_state.json`` holds (what the trainer's periodic evaluations record); other specs hash themselves."""
    from trainers import SpyRLConfig

    config = SpyRLConfig.preset("cpu-smoke", output_dir=str(tmp_path / "run")).to_dict()
    checkpoint = tmp_path / "run" / "checkpoints" / "iter_00003"
    (checkpoint / "model").mkdir(parents=True)
    saved = json.loads(json.dumps({"format": 2, "iteration": 3, "config": config}))  # as trainer_state writes it
    (checkpoint / "trainer_state.json").write_text(json.dumps(saved, indent=1))
    trained = recipe_hash(config)
    assert len(trained) == 16 and int(trained, 16) >= 0
    assert recipe_hash(f"hf:{checkpoint / 'model'}") == recipe_hash(f"hf:{checkpoint}") == trained
    other = SpyRLConfig.preset("cpu-smoke", output_dir=str(tmp_path / "run"), seed=1).to_dict()
    assert recipe_hash(other) != trained
    assert recipe_hash("heuristic") == recipe_hash("heuristic") != recipe_hash("random")
    plain = tmp_path / "hf-trainer-checkpoint"  # transformers' Trainer writes a trainer_state.json with no config
    plain.mkdir()
    (plain / "trainer_state.json").write_text('{"log_history": []}')
    assert recipe_hash(f"hf:{plain}") == recipe_hash(f"hf:{plain}") != trained


# ------------------------------------------------------------------ scoring paths
def test_a_leaderboard_scoring_is_a_entry(ledger_file):
    results = run_leaderboard("detect", agents.load("heuristic"), model="heuristic", limit=6)
    [look] = read_ledger(ledger_file)
    assert look["set"] == "detect-v1" and look["set_sha256"] == RELEASED_SHA256["detect-v1"]
    assert look["model"] == "heuristic" and look["recipe"] == recipe_hash("heuristic")
    interval = results["results"]["detect-v1"]["interval"]
    assert look["result"] == {"metric": "detection_accuracy", **interval}
    assert look["result"]["n"] == 6 and look["command"] is None and look["preregistration"] is None
    run_leaderboard("spy", agents.load("random"), limit=2, look=Look(ledger=False))  # off: no look
    run_leaderboard("spy", agents.load("random"), limit=2)
    assert looks(read_ledger(ledger_file)) == {"detect-v1": 1, "spy-v1": 1}
    assert read_ledger(ledger_file)[1]["result"]["metric"] == "survival_rate"


def test_a_leaderboard_scoring_with_a_ledger_it_cannot_write_plays_nothing(tmp_path):
    class Counting:
        name, calls = "counting", 0

        def act(self, observations):
            Counting.calls += 1
            return ["<vote>1</vote>"] * len(observations)

    (tmp_path / "ledger").mkdir()
    with pytest.raises(ValueError, match="ledger"):
        run_leaderboard("detect", Counting(), limit=2, look=Look(ledger=tmp_path / "ledger"))
    assert Counting.calls == 0


def _heldout_documents():
    return split_documents(load_embedded())[1][:4]


def test_a_heldout_evaluation_is_a_look_fingerprinted_by_its_games(ledger_file):
    config = GameConfig(n_players=3)
    documents = _heldout_documents()
    players = [agents.load("heuristic")] * 3
    _, games = evaluate_heldout(players, config, documents, 4, seed=7)
    evaluate_heldout(players, config, documents[::-1], 4, seed=7, look=Look(model="tuned@iter3", recipe={"lr": 1e-6}))
    evaluate_heldout(players, config, documents, 4, seed=8, run_id="heldout-b")
    first, same_games, other_seed = read_ledger(ledger_file)
    assert first["set"] == "heldout" and first["model"] == "heuristic" and first["recipe"] == recipe_hash("heuristic")
    mean = sum(g["detection_accuracy"] for g in games) / len(games)
    assert first["result"]["metric"] == "detection_accuracy" and first["result"]["n"] == 4
    assert first["result"]["mean"] == pytest.approx(mean)
    # the fingerprint is of the games: sorted document ids, number of games, seed, game config
    assert same_games["set_sha256"] == first["set_sha256"] != other_seed["set_sha256"]
    assert same_games["model"] == "tuned@iter3" and same_games["recipe"] == recipe_hash({"lr": 1e-6})
    assert other_seed["set"] == "heldout-b"
    evaluate_heldout(players, GameConfig(n_players=3, degrade="perturb_numbers"), documents, 4, seed=7)
    assert read_ledger(ledger_file)[-1]["set_sha256"] != first["set_sha256"]


def test_the_trainers_periodic_evaluation_is_a_look_with_its_recipe(tmp_path, ledger_file):
    """Model ``<name_or_path>@iter<N>``; its recipe is the run's config, so a checkpoint of the run scored
    later (``spyrl leaderboard --model hf:.../model``) records the same recipe."""
    from agents.tiny import build_tiny_model
    from trainers import SpyRLConfig
    from trainers.grpo import SpyRLTrainer

    model = build_tiny_model(tmp_path / "tiny", hidden_size=32, num_layers=1, num_heads=2)
    config = SpyRLConfig.from_dict(dict(
        name_or_path=str(model), output_dir=str(tmp_path / "run"), device="cpu", dtype="float32",
        documents_per_iteration=1, games_per_document=1, iterations=1, max_completion_tokens=6,
        vote_mode="constrained", performer="heuristic", stage_schedule="detect", checkpoint_every=1000,
        eval_games=2, eval_every=1, report_to=["jsonl"], progress=False,
        game={"n_players": 3, "max_document_chars": 300},
    ))  # fmt: skip
    trainer = SpyRLTrainer(config)
    metrics = trainer.evaluate(2)
    [look] = read_ledger(ledger_file)
    assert look["set"] == "heldout" and look["model"] == f"{model}@iter0"
    assert look["result"]["n"] == 2 and look["result"]["mean"] == pytest.approx(metrics["detection_accuracy"])
    checkpoint = trainer.save_checkpoint()
    assert look["recipe"] == recipe_hash(config.to_dict()) == recipe_hash(f"hf:{checkpoint / 'model'}")


def test_spyrl_eval_records_a_look_per_benchmark_with_its_command(tmp_path, ledger_file, capsys):
    pytest.importorskip("math_verify")
    data = ROOT / "tests" / "fixtures" / "benchmarks"
    argv = ["eval", "--model", "heuristic", "--benchmarks", "gsm8k,math500", "--limit", "3", "--out",
            str(tmp_path / "r.json"), "--data", f"gsm8k={data / 'gsm8k'}", "--data", f"math500={data / 'math500'}"]  # fmt: skip
    assert main(argv) == 0
    results = json.loads((tmp_path / "r.json").read_text())
    gsm8k, math500 = read_ledger(ledger_file)
    assert (gsm8k["set"], math500["set"]) == ("gsm8k", "math500")
    assert gsm8k["model"] == "heuristic" and gsm8k["command"] == ["spyrl", *argv]
    assert gsm8k["result"]["metric"] == "accuracy" and gsm8k["result"]["n"] == 3
    assert gsm8k["result"]["mean"] == pytest.approx(results["results"]["gsm8k"]["accuracy"])
    assert gsm8k["set_sha256"] != math500["set_sha256"]
    own = ["eval", "--model", "random", "--benchmarks", "gsm8k", "--limit", "2", "--out", str(tmp_path / "s.json"),
           "--data", f"gsm8k={data / 'gsm8k'}", "--ledger", str(tmp_path / "own.jsonl")]  # fmt: skip
    assert main(own) == 0
    assert len(read_ledger(ledger_file)) == 2 and looks(read_ledger(tmp_path / "own.jsonl")) == {"gsm8k": 1}


# ------------------------------------------------------------------------ the CLI
def test_spyrl_leaderboard_records_its_command_and_honours_ledger_off(tmp_path, ledger_file, capsys):
    argv = ["leaderboard", "detect", "--model", "heuristic", "--limit", "3", "--out", str(tmp_path / "r.json")]
    assert main(argv) == 0
    [look] = read_ledger(ledger_file)
    assert look["command"] == ["spyrl", *argv] and look["set"] == "detect-v1"
    results = json.loads((tmp_path / "r.json").read_text())  # the CLI records its sampling settings
    assert results["seed"] == 0 and results["decoding"]["temperature"] == 0.7 and results["preregistration"] is None
    assert main([*argv, "--overwrite", "--ledger", "off"]) == 0
    assert len(read_ledger(ledger_file)) == 1


def test_spyrl_ledger_prints_looks_per_set_without_escapes(tmp_path, ledger_file, capsys, monkeypatch):
    for entry in (_entry(), _entry(model="random"), _entry("gsm8k"), _entry("\x1b[31mred[/]", model="\x1b]0;x\x07")):
        append_entry(entry)
    assert main(["ledger"]) == 0  # SPYRL_LEDGER's
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") >= 5}
    assert {"detect-v1", "gsm8k"} <= set(rows) and "\x1b" not in out and "\x07" not in out
    assert [cell.strip() for cell in rows["detect-v1"].split("│")[2:4]] == ["2", "2"]  # looks, models
    assert main(["ledger", str(tmp_path / "none.jsonl")]) == 0
    assert "no looks recorded" in capsys.readouterr().out
    monkeypatch.setenv("SPYRL_LEDGER", "off")
    assert main(["ledger"]) == 2
    assert capsys.readouterr().err.startswith("error: the ledger is off")
    ledger_file.write_text("[1, 2]\n")
    assert main(["ledger", str(ledger_file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "line 1 is not a look" in err
