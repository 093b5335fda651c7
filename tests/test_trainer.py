"""The trainer end to end on CPU: CLI preset, exact resume after a kill, learning, direction."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trainers import SpyRLConfig  # noqa: E402
from trainers.sinks import read_metrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TIMING_KEYS = ("time/", "perf/rollout_tokens_per_s", "perf/update_tokens_per_s")


def spyrl(*args, timeout=600):
    proc = subprocess.run(
        [sys.executable, "-m", "spyrl", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_cpu_smoke_preset_writes_checkpoints_metrics_and_curves(tmp_path):
    out = tmp_path / "run"
    spyrl("train", "--preset", "cpu-smoke", "--output-dir", str(out), "--set", "progress=false")
    rows = read_metrics(out)
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    assert [r["stage"] for r in rows] == ["detect", "detect", "perform", "perform"]  # alternate, K_min = 2
    for key in ("env/detection_accuracy", "env/na_rate", "env/spy_caught_rate", "losses/kl", "losses/clip_fraction",
                "losses/entropy", "perf/update_tokens_per_s", "lengths/vote_completion_tokens", "env/violation_rate"):  # fmt: skip
        assert all(isinstance(r[key], (int, float)) for r in rows), key
    assert (out / "checkpoints" / "latest").read_text() == "iter_00004"
    assert (out / "checkpoints" / "iter_00002" / "trainer_state.json").exists()
    assert not list(out.rglob("*.pt")) and not list(out.rglob("*.pkl"))  # no pickle anywhere
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert len(list((out / "buffers").glob("iter_*.parquet"))) == 4
    from agents.rules import RULES, played_shares
    from spy_env.buffer import EpisodeBuffer

    for row in rows:  # each rule baseline on the iteration's own games, beside the voters' accuracy
        buffer = EpisodeBuffer.load(out / "buffers" / f"iter_{row['iteration'] - 1:05d}.parquet").rows
        for name, rule in RULES.items():
            want = np.mean(played_shares(buffer, rule))
            assert row[f"env/rule_{name.replace('-', '_')}_accuracy"] == pytest.approx(want), name


def _resume_config(out: Path) -> list[str]:
    return [
        "train", "--preset", "cpu-smoke", "--output-dir", str(out),
        "--set", "progress=false", "--set", "checkpoint_every=1", "--set", "keep_buffers=false",
    ]  # fmt: skip


def _final_state(out: Path):
    from safetensors.torch import load_file

    params = load_file(str(out / "checkpoints" / "iter_00004" / "model" / "model.safetensors"))
    rows = [{k: v for k, v in r.items() if not k.startswith(TIMING_KEYS)} for r in read_metrics(out)]
    return params, rows


@pytest.mark.slow
def test_resume_after_a_kill_is_identical_to_a_straight_run(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    spyrl(*_resume_config(straight))
    proc = subprocess.Popen([sys.executable, "-m", "spyrl", *_resume_config(resumed)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 300
    while not (resumed / "checkpoints" / "iter_00002").exists() and time.monotonic() < deadline:
        assert proc.poll() is None, "training ended before it could be killed"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = (resumed / "checkpoints" / "latest").read_text()
    assert done in ("iter_00002", "iter_00003")  # killed mid-run, not at the end
    spyrl(*_resume_config(resumed), "--resume", "latest")
    params_a, rows_a = _final_state(straight)
    params_b, rows_b = _final_state(resumed)
    assert params_a.keys() == params_b.keys()
    for name in params_a:
        assert torch.equal(params_a[name], params_b[name]), name
    assert rows_a == rows_b


def toy_detection_config(out: Path, **overrides) -> SpyRLConfig:
    """Detector-only toy: 3 players, the spy gets nothing (blank), heuristic performers, a short
    vote prompt, constrained vote decoding (the documented warm start) and a tiny Llama."""
    from agents.tiny import build_tiny_model

    model = build_tiny_model(out.parent / "tiny-64x2", hidden_size=64, num_layers=2, num_heads=4)
    values = dict(
        name_or_path=str(model), output_dir=str(out), device="cpu", dtype="float32",
        documents_per_iteration=16, games_per_document=4, replay_setup=True,
        mini_batch_size=64, micro_batch_size=32, learning_rate=3e-3, beta=0.0, iterations=60,
        max_completion_tokens=12, generation_batch_size=192, vote_mode="constrained", performer="heuristic",
        stage_schedule="detect", checkpoint_every=1000, keep_buffers=False,
        eval_games=100, eval_every=10, report_to=["jsonl"], progress=False,
        game={"n_players": 3, "degrade": "blank", "prompts": {"vote": "{performances}\nThe spy is Player"}},
    )  # fmt: skip
    values.update(overrides)
    return SpyRLConfig.from_dict(values)


@pytest.mark.slow
def test_it_learns_to_detect_the_spy(tmp_path):
    from trainers.grpo import SpyRLTrainer

    trainer = SpyRLTrainer(toy_detection_config(tmp_path / "run"))
    before = trainer.evaluate(100)["detection_accuracy"]
    assert 0.3 <= before <= 0.7  # chance: 2 legal targets per civilian voter
    best = 0.0
    start = time.monotonic()
    while trainer.iteration < trainer.config.run.iterations and time.monotonic() - start < 480:
        metrics = trainer.train_iteration()
        best = max(best, metrics.get("eval/detection_accuracy", 0.0))
        if best >= 0.8:
            break
    after = trainer.evaluate(100)["detection_accuracy"]
    assert max(best, after) >= 0.8, f"held-out detection accuracy {before:.2f} -> {after:.2f} (best {best:.2f})"


@pytest.mark.slow
def test_a_performing_iteration_moves_performances_toward_higher_reward(tmp_path):
    """Tiny self-play performers, heuristic voters: one performing-stage update must make the
    iteration's higher-advantage performances likelier and lower-advantage ones less likely."""
    from trainers.grpo import SpyRLTrainer
    from trainers.logprobs import sequence_logps

    config = toy_detection_config(
        tmp_path / "run", performer="self", voter="heuristic", stage_schedule="perform", eval_games=0,
        max_completion_tokens=16, learning_rate=1e-3, documents_per_iteration=8,
        game={"n_players": 4, "degrade": "perturb_numbers", "max_document_chars": 600},
    )  # fmt: skip
    trainer = SpyRLTrainer(config)
    buffer = trainer.rollouts()
    samples, _ = trainer.select_samples(buffer, "perform")
    advantages = np.array([s.advantage for s in samples])
    rewards = np.array([s.row["reward"] for s in samples])
    assert advantages.std() > 0  # the heuristic voters do react to the performances

    def seq_logps():
        with torch.no_grad():
            logps, mask, *_ = sequence_logps(
                trainer.model, [s.row["prompt_token_ids"] for s in samples], [s.row["completion_token_ids"] for s in samples],
                trainer.pad_id,
            )  # fmt: skip
        return (logps * mask).sum(-1).numpy()

    before = seq_logps()
    trainer.update(samples, "perform")
    delta = seq_logps() - before
    assert float(np.dot(advantages, delta)) > 0  # first-order improvement of the surrogate
    assert delta[advantages > 0].mean() > delta[advantages < 0].mean()
    weights = np.exp(delta - delta.max())
    assert float((weights * rewards).sum() / weights.sum()) > rewards.mean()  # reweighted reward rose
    json.dumps(trainer.rae.state_dict())


@pytest.mark.slow
def test_lora_trains_only_adapters_and_resumes(tmp_path):
    pytest.importorskip("peft")
    from trainers.grpo import SpyRLTrainer

    config = SpyRLConfig.preset(
        "cpu-smoke", output_dir=str(tmp_path / "run"), lora_r=4, lora_target_modules="all-linear",
        iterations=1, checkpoint_every=1, keep_buffers=False, progress=False, learning_rate=1e-2,
    )  # fmt: skip
    trainer = SpyRLTrainer(config)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    changed = {n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p)}
    assert changed and all("lora_" in n for n in changed)
    assert (tmp_path / "run" / "checkpoints" / "iter_00001" / "model" / "adapter_model.safetensors").exists()
    resumed = SpyRLTrainer.from_checkpoint(config)
    assert resumed.iteration == 1
    for (n, p), (_, q) in zip(trainer.model.named_parameters(), resumed.model.named_parameters(), strict=True):
        assert torch.equal(p, q), n


@pytest.mark.slow
def test_two_processes_with_ddp_on_cpu_and_resume(tmp_path):
    """`torchrun --nproc_per_node 2`: accelerate's DDP (gloo) keeps replicas identical, games and
    stage decisions are global, each rank saves its own buffer, rank 0 writes checkpoints; a run
    stopped after 2 iterations and resumed (accelerate's save_state/load_state) ends like a
    straight 3-iteration run."""
    from safetensors.torch import load_file

    def launch(out, *extra):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "spyrl", "train",
               "--preset", "cpu-smoke", "--output-dir", str(out), "--set", "progress=false",
               "--set", "checkpoint_every=1", *extra]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    launch(straight, "--set", "iterations=3")
    rows = read_metrics(straight)
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert all(r["dist/num_processes"] == 2 and r["env/games"] == 16 for r in rows)  # the global batch
    assert all(r["dist/param_sync_error"] == 0.0 for r in rows)
    assert len(list((straight / "buffers").glob("iter_00000.rank*.parquet"))) == 2
    assert (straight / "checkpoints" / "latest").read_text() == "iter_00003"
    assert (straight / "checkpoints" / "iter_00003" / "accelerate").is_dir()

    launch(resumed, "--set", "iterations=2")
    launch(resumed, "--set", "iterations=3", "--resume", "latest")
    final = [
        load_file(str(out / "checkpoints" / "iter_00003" / "model" / "model.safetensors"))
        for out in (straight, resumed)
    ]
    assert final[0].keys() == final[1].keys()
    for name in final[0]:
        assert torch.equal(final[0][name], final[1][name]), name
    strip = [[{k: v for k, v in r.items() if not k.startswith(TIMING_KEYS)} for r in read_metrics(out)]
             for out in (straight, resumed)]  # fmt: skip
    assert strip[0] == strip[1]


def _smoke(tmp_path, name, **overrides):
    values = dict(output_dir=str(tmp_path / name), iterations=1, keep_buffers=False, progress=False,
                  learning_rate=1e-2, stage_schedule="detect")  # fmt: skip
    values.update(overrides)
    return SpyRLConfig.preset("cpu-smoke", **values)


@pytest.mark.slow
def test_gradient_checkpointing_changes_memory_not_updates(tmp_path):
    from trainers.grpo import SpyRLTrainer

    plain = SpyRLTrainer(_smoke(tmp_path, "plain"))
    samples, _ = plain.select_samples(plain.rollouts(), "detect")
    assert any(s.advantage != 0 for s in samples)
    checkpointed = SpyRLTrainer(_smoke(tmp_path, "checkpointed", gradient_checkpointing=True))
    assert any(getattr(m, "gradient_checkpointing", False) for m in checkpointed.model.modules())
    before = {n: p.detach().clone() for n, p in plain.model.named_parameters()}
    plain.update(samples, "detect")
    checkpointed.update(samples, "detect")
    moved = 0
    for (name, p), (_, q) in zip(plain.model.named_parameters(), checkpointed.model.named_parameters(), strict=True):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=1e-5, msg=name)
        moved += not torch.equal(p, before[name])
    assert moved > 0


@pytest.mark.slow
def test_lora_with_gradient_checkpointing_still_trains_the_adapters(tmp_path):
    pytest.importorskip("peft")
    from trainers.grpo import SpyRLTrainer

    trainer = SpyRLTrainer(_smoke(tmp_path, "lora", lora_r=4, gradient_checkpointing=True, checkpoint_every=5))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}
    metrics = trainer.train_iteration()
    assert metrics["losses/optimizer_steps"] > 0
    assert any(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters() if "lora_" in n)


@pytest.mark.slow
def test_bfloat16_training_keeps_dtype_and_finite_metrics(tmp_path):
    from trainers.grpo import SpyRLTrainer

    trainer = SpyRLTrainer(_smoke(tmp_path, "bf16", dtype="bfloat16", gradient_checkpointing=True))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    metrics = trainer.train_iteration()
    assert all(p.dtype == torch.bfloat16 for p in trainer.model.parameters())
    assert metrics["losses/optimizer_steps"] > 0
    assert all(math.isfinite(metrics[k]) for k in ("losses/loss", "losses/kl", "losses/entropy", "losses/grad_norm"))
    assert any(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())


def test_perform_temperature_samples_and_scores_performances_apart_from_votes(tmp_path, monkeypatch):
    """``decoding.perform_temperature``: a replayed setup's performances drawn near-greedy are one text per
    seat, the votes on them still draw at ``temperature``, and each stage's update computes its
    log-probs at its own temperature."""
    import trainers.models
    import trainers.update
    from trainers.grpo import SpyRLTrainer

    config = toy_detection_config(  # mini-batches, 2 epochs, a KL term: behaviour and reference log-probs too
        tmp_path / "run", performer="self", stage_schedule="alternate", eval_games=0, documents_per_iteration=4,
        max_completion_tokens=8, perform_temperature=0.02, epochs=2, beta=0.01, mini_batch_size=16, micro_batch_size=8,
    )  # fmt: skip
    trainer = SpyRLTrainer(config)
    buffer = trainer.rollouts()
    texts, votes = {}, {}
    for r in buffer:
        key = (r["document_id"], r["seat"])
        (texts if r["stage"] == "perform" else votes).setdefault(key, set()).add(
            tuple(r["completion_token_ids"]) if r["stage"] == "perform" else r["vote"]
        )
    assert texts and all(len(v) == 1 for v in texts.values())  # 4 replays, one text a seat
    assert any(len(v) > 1 for v in votes.values())  # the votes on those same texts still vary
    seen = {}
    for module in (trainers.update, trainers.models):  # the step's and behaviour log-probs, the reference's
        real = module.sequence_logps

        def recording(*args, real=real, name=module.__name__, **kwargs):
            seen.setdefault(name, set()).add(args[4])
            return real(*args, **kwargs)

        monkeypatch.setattr(module, "sequence_logps", recording)
    for stage in ("perform", "detect"):
        samples, _ = trainer.select_samples(buffer, stage)
        seen.clear()
        trainer.update(samples, stage)
        want = 0.02 if stage == "perform" else 1.0
        assert seen == {m: {want} for m in ("trainers.update", "trainers.models")}, stage


def test_a_fixed_llm_performer_samples_as_the_run_decodes_stays_frozen_and_never_trains(tmp_path, monkeypatch):
    """``performer=hf:PATH``: a frozen copy performs in every seat. It is loaded once, on the learner's device
    and in its dtype, samples as ``decoding`` says (``perform_temperature``, the budget, the answer mode) from
    its own seed stream, its rows never train whatever the stage, and the votes on its texts do."""
    import agents.hf
    from trainers.grpo import SpyRLTrainer
    from trainers.seeds import SeedStream, seed_for

    config = toy_detection_config(
        tmp_path / "run", stage_schedule="alternate", eval_games=0, documents_per_iteration=4,
        max_completion_tokens=16, perform_temperature=0.02, answer="boxed", answer_tokens=3,
    )  # fmt: skip
    config = config.with_overrides([f"performer=hf:{config.model.name_or_path}"])
    trainer = SpyRLTrainer(config)
    frozen = trainer.fixed.performer
    assert isinstance(frozen, agents.hf.HFPolicy) and frozen.model is not trainer.unwrapped
    assert (frozen.sampling.temperature, frozen.sampling.max_new_tokens, frozen.perform_sampling.temperature) == (
        1.0, 16, 0.02,
    )  # fmt: skip
    assert frozen.decoding == config.decoding.options() and frozen.decoding.answer == "boxed"
    assert {(p.device.type, p.dtype) for p in frozen.model.parameters()} == {("cpu", torch.float32)}
    before = {k: v.clone() for k, v in frozen.model.state_dict().items()}
    buffer = trainer.rollouts()
    assert frozen.perform_sampling.seed == seed_for(config.run.seed, 0, SeedStream.FIXED)
    texts = {}
    for r in buffer:
        if r["stage"] == "perform":
            assert 0 < len(r["completion_token_ids"]) <= 16 and r["trainable"]  # the frozen copy's own tokens
            texts.setdefault((r["document_id"], r["seat"]), set()).add(tuple(r["completion_token_ids"]))
    assert texts and all(len(v) == 1 for v in texts.values())  # near-greedy at 0.02: one text a seat
    assert [tuple(r["completion_token_ids"]) for r in trainer.rollouts()] == [
        tuple(r["completion_token_ids"]) for r in buffer
    ]  # the same iteration draws the same again
    assert trainer.select_samples(buffer, "perform")[0] == []  # not the learner's tokens: never trained
    votes, _ = trainer.select_samples(buffer, "detect")
    assert votes and {s.row["stage"] for s in votes} == {"vote"}
    learner = {k: v.clone() for k, v in trainer.unwrapped.state_dict().items()}
    trainer.update(votes, "detect")
    assert any(not torch.equal(v, trainer.unwrapped.state_dict()[k]) for k, v in learner.items())
    assert all(torch.equal(v, frozen.model.state_dict()[k]) for k, v in before.items())
    monkeypatch.setattr(agents.hf.HFPolicy, "from_pretrained", None)  # loaded once: evaluation reuses it
    assert trainer.evaluate(6) == trainer.evaluate(6)
    assert trainer.fixed.performer is frozen


def test_forced_vote_tokens_are_never_scored(tmp_path):
    """Constrained votes: only the seat token is the model's choice. Changing the forced tokens after it
    (``</vote>`` and EOS) must not change an update at all; changing the choice must."""
    from trainers.grpo import SpyRLTrainer

    config = toy_detection_config(tmp_path / "run", documents_per_iteration=2, games_per_document=2, eval_games=0)
    trainer = SpyRLTrainer(config)
    samples, _ = trainer.select_samples(trainer.rollouts(), "detect")
    assert samples and all(sum(s.row["completion_mask"]) == 1 for s in samples)  # one chosen token per vote
    start = {k: v.clone() for k, v in trainer.model.state_dict().items()}

    def updated(samples):
        trainer.model.load_state_dict(start)
        trainer.updater.optimizer = torch.optim.AdamW(trainer.model.parameters(), lr=config.update.learning_rate)
        trainer.update(list(samples), "detect")
        return {k: v.clone() for k, v in trainer.model.state_dict().items()}

    def edit(samples, after_choice: bool):
        out = []
        for s in samples:
            r = s.row
            ids, mask = list(r["completion_token_ids"]), list(r["completion_mask"])
            choice = mask.index(1)
            targets = range(choice + 1, len(ids)) if after_choice else [choice]
            for t in targets:
                ids[t] = (ids[t] + 1) % 50
            out.append(replace(s, row={**r, "completion_token_ids": ids}))
        return out

    base = updated(samples)
    assert any(not torch.equal(base[k], start[k]) for k in start)  # it trained
    same = updated(edit(samples, after_choice=True))
    assert all(torch.equal(base[k], same[k]) for k in base)
    other = updated(edit(samples, after_choice=False))
    assert any(not torch.equal(base[k], other[k]) for k in base)


def test_fixed_civilians_leave_the_learner_the_spy_seat_and_train_only_its_performances(tmp_path):
    """``civilians=heuristic``: the spy-v1 leaderboard's scene on training documents. The learner writes
    every spy performance (and nothing else), only those rows train, and the update runs on them."""
    from trainers.grpo import SpyRLTrainer

    with pytest.raises(ValueError, match="civilians"):
        SpyRLConfig.from_dict(dict(civilians="heuristic", stage_schedule="alternate"))
    with pytest.raises(ValueError, match="civilians"):
        SpyRLConfig.from_dict(dict(civilians="heuristic", stage_schedule="perform", voter="heuristic"))
    with pytest.raises(ValueError, match="civilians"):
        SpyRLConfig.from_dict(dict(civilians="no-such-agent", stage_schedule="perform"))
    config = toy_detection_config(
        tmp_path / "run", performer="self", civilians="heuristic", stage_schedule="perform", eval_games=0,
        max_completion_tokens=8, documents_per_iteration=3, games_per_document=2, iterations=1,
        game={"n_players": 4, "degrade": "mask_spans", "max_document_chars": 400},
    )  # fmt: skip
    trainer = SpyRLTrainer(config)
    buffer = trainer.rollouts()
    spy_rows = [r for r in buffer if r["role"] == "spy"]
    assert len(spy_rows) == 2 * 6 and len(buffer) == 8 * 6
    assert all(r["completion_token_ids"] for r in spy_rows)  # the learner's own tokens
    assert not any(r["completion_token_ids"] for r in buffer if r["role"] == "civilian")  # scripted: no tokens
    assert {r["trainable"] for r in buffer if r["role"] == "civilian"} == {False}
    samples, stats = trainer.select_samples(buffer, "perform")
    assert [s.row["role"] for s in samples] == ["spy"] * 6
    assert stats["samples/count"] == 6 and not any(v for k, v in stats.items() if k.startswith("samples/skipped"))
    trainer.update(samples, "perform")
    assert trainer.train_iteration()["stage"] == "perform"


def test_soft_civilians_give_the_spy_the_mass_of_their_recorded_votes(tmp_path):
    """``civilians=heuristic-soft`` with ``perform_reward=expected``: the civilians record the softmax their
    votes were drawn from, and the spy's performing reward is ``−(m̃_u − m̄_c)`` over those distributions, a
    graded value where the cast votes give whole numbers."""
    from spy_env.stage import Stage
    from trainers.grpo import SpyRLTrainer
    from trainers.perform_rewards import perform_stage_rewards

    config = toy_detection_config(
        tmp_path / "run", performer="self", civilians="heuristic-soft", stage_schedule="perform", eval_games=0,
        perform_reward="expected", perform_group_norm=False, max_completion_tokens=8, documents_per_iteration=3,
        games_per_document=2, iterations=1, game={"n_players": 4, "degrade": "mask_spans", "max_document_chars": 400},
    )  # fmt: skip
    trainer = SpyRLTrainer(config)
    buffer = trainer.rollouts()
    civilian_votes = [r for r in buffer if r["role"] == "civilian" and r["stage"] == Stage.VOTE]
    assert len(civilian_votes) == 3 * 6 and all(math.isclose(sum(r["vote_probs"]), 1.0) for r in civilian_votes)
    spy_rows = [r for r in buffer if r["role"] == "spy" and r["stage"] == Stage.PERFORM]
    rewards, _ = perform_stage_rewards(spy_rows, buffer, config.advantages, config.game)
    for row, reward in zip(spy_rows, rewards, strict=True):
        votes = [r for r in buffer if r["game_id"] == row["game_id"] and r["stage"] == Stage.VOTE]
        received = [sum(r["vote_probs"][seat] for r in votes) for seat in range(4)]
        civilians = [received[seat] for seat in range(4) if seat != row["spy_seat"]]
        assert 0 < received[row["spy_seat"]] < 3  # some of the civilians' mass lands on the spy, never all of it
        assert math.isclose(reward, -(received[row["spy_seat"]] - sum(civilians) / 3), abs_tol=1e-9)
    assert len({round(r, 6) for r in rewards}) > 1 and any(r != round(r * 4) / 4 for r in rewards)
    samples, _ = trainer.select_samples(buffer, "perform")
    assert [s.row["role"] for s in samples] == ["spy"] * 6 and all(math.isfinite(s.advantage) for s in samples)


def test_balanced_spy_seats_reach_the_trainers_games(tmp_path):
    """``rollout.spy_seats=balanced``: each iteration's five documents put the spy once in every seat of the
    5-player game, on the documents and masks the random deal plays; a bad value is refused by name."""
    from trainers.grpo import SpyRLTrainer

    with pytest.raises(ValueError, match="spy_seats"):
        SpyRLConfig.from_dict(dict(spy_seats="even"))
    game = {"n_players": 5, "degrade": "mask_spans", "max_document_chars": 300}
    deals = {}
    for spy_seats in ("random", "balanced"):
        config = toy_detection_config(
            tmp_path / spy_seats, spy_seats=spy_seats, documents_per_iteration=5, games_per_document=1,
            eval_games=0, iterations=2, game=game,
        )  # fmt: skip
        trainer = SpyRLTrainer(config)
        games = []
        for iteration in range(2):
            trainer.iteration = iteration
            rows = [r for r in trainer.rollouts() if r["stage"] == "perform" and r["seat"] == 0]
            games.append([(r["spy_seat"], r["document_id"], r["degrade_seed"]) for r in rows])
        deals[spy_seats] = games
    for games in deals["balanced"]:
        assert sorted(seat for seat, *_ in games) == [0, 1, 2, 3, 4]
    assert [[g[1:] for g in games] for games in deals["balanced"]] == [[g[1:] for g in gs] for gs in deals["random"]]
