"""spyrl.integrations.trl with TRL's real GRPOTrainer on the tiny model, on CPU (issue #21, item 1).

The rewards TRL logs per completion are checked against the environment itself: the same game
re-created from the row's reset options and played with the same texts through ``spy_env``.
"""

from __future__ import annotations

import pytest

from tests.conftest import VLLM_LOGPROB_ATOL

pytest.importorskip("trl")
pytest.importorskip("torch")

import spy_env
from spy_env.rewards import weighted_reward
from spy_env.stage import Stage
from spyrl.integrations.trl import (
    VOTE_PREFILL,
    DetectionReward,
    GameReward,
    SpyEnvironment,
    detection_dataset,
    spy_dataset,
)

CONFIG = spy_env.GameConfig(n_players=4, max_document_chars=600)


def _grpo_args(tmp_path, max_completion_length):
    """Two CPU steps of 4 completions (one prompt), logged every step, nothing saved."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=max_completion_length,
        max_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )


def _train(tiny_model_dir, tmp_path, dataset, reward, max_completion_length=12):
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    class CountSteps(TrainerCallback):
        optimizer_steps = 0

        def on_optimizer_step(self, args, state, control, **kwargs):
            CountSteps.optimizer_steps += 1

    args = _grpo_args(tmp_path, max_completion_length)
    trainer = GRPOTrainer(
        model=str(tiny_model_dir), reward_funcs=reward, args=args, train_dataset=dataset, callbacks=[CountSteps()]
    )
    trainer.train()
    return trainer, CountSteps.optimizer_steps


def _env_reward(row, text, stage, detector=None):
    """The reward ``spy_env`` gives ``text`` in the row's seat: the game re-created and played again."""
    env = spy_env.parallel_env(CONFIG, rounds=1)
    options = {"document_id": row["document_id"], "spy_seat": row["spy_seat"], "degrade_seed": row["degrade_seed"]}
    env.reset(seed=row["game_seed"], options=options)
    me = env.possible_agents[row["seat"]]
    perform = {a: row["performances"][env.seat_of[a]] for a in env.agents}
    if stage == "perform":
        perform[me] = text
    observations = env.step(perform)[0]
    if stage == "perform":
        # one detector per game, seeded by the game, voting for every seat in one call
        votes = dict(
            zip(env.agents, detector(row["game_seed"]).act([observations[a] for a in env.agents]), strict=True)
        )
    else:
        votes = {a: row["votes"][env.seat_of[a]] for a in env.agents}
        votes[me] = text
    comps = env.step(votes)[4][me]["reward_components"]
    if stage == "perform":
        return weighted_reward(CONFIG, perform=comps["perform"], penalty=comps["perform_penalty"])
    return weighted_reward(CONFIG, detect=comps["detect"], penalty=comps["vote_penalty"])


def _check_logged(trainer, dataset, name, stage, detector=None, prefill=""):
    by_prompt = {str(r["prompt"]): r for r in dataset}
    logs = trainer._logs
    assert len(logs["completion"]) == 4  # the last generation batch: 1 prompt x 4 generations
    texts = []
    for prompt, completion, logged in zip(logs["prompt"], logs["completion"], logs["rewards"][name], strict=True):
        text = prefill + (completion[-1]["content"] if isinstance(completion, list) else completion)
        assert logged == pytest.approx(_env_reward(by_prompt[str(prompt)], text, stage, detector), abs=1e-6)
        texts.append(text)
    return texts


def test_grpo_trains_on_the_detection_dataset_and_logs_the_envs_rewards(tiny_model_dir, tmp_path):
    dataset = detection_dataset(CONFIG, num_games=2, seed=0)
    assert set(dataset["role"]) == {"civilian"} and len(dataset) == 2 * 3
    trainer, optimizer_steps = _train(tiny_model_dir, tmp_path, dataset, DetectionReward(CONFIG))
    assert trainer.state.global_step == 2 and optimizer_steps == 2
    _check_logged(trainer, dataset, "spy_detection", "vote")


def test_grpo_trains_on_prefilled_vote_prompts_and_scores_vote_tag_plus_completion(tiny_model_dir, tmp_path):
    """TRL 1.16 opens a new assistant turn after a conversational prompt, so a prefilled ``<vote>``
    reaches it as chat-template text that ends in ``<vote>``; the reward scores ``<vote>`` + completion."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    dataset = detection_dataset(CONFIG, num_games=2, seed=0, prefill_vote=True, tokenizer=tokenizer)
    plain = detection_dataset(CONFIG, num_games=2, seed=0)
    assert set(dataset["prefill"]) == {VOTE_PREFILL} and all(p.endswith(VOTE_PREFILL) for p in dataset["prompt"])
    assert dataset["prompt"][0].startswith(tokenizer.apply_chat_template(plain["prompt"][0], tokenize=False))
    trainer, optimizer_steps = _train(tiny_model_dir, tmp_path, dataset, DetectionReward(CONFIG), 4)
    assert trainer.state.global_step == 2 and optimizer_steps == 2
    texts = _check_logged(trainer, dataset, "spy_detection", "vote", prefill=VOTE_PREFILL)
    assert all(t.startswith(VOTE_PREFILL) for t in texts)

    # a prefilled completion's reward is the env's reward for the whole "<vote>..." text
    columns = {k: dataset[k] for k in dataset.column_names if k != "prompt"}
    completions = [f"{s + 1}</vote>" for s in dataset["spy_seat"]]
    completions[1] = f"{dataset['seat'][1] + 1}</vote>"  # a vote for oneself: the env's penalty
    completions[2] = "maybe 2"  # no closing tag: the env's parsing decides
    rewards = DetectionReward(CONFIG)(dataset["prompt"], completions, **columns)
    want = [_env_reward(r, VOTE_PREFILL + c, "vote") for r, c in zip(plain, completions, strict=True)]
    assert rewards == pytest.approx(want) and rewards[0] == 1.0 and rewards[1] < 1.0
    unprefilled = DetectionReward(CONFIG)(plain["prompt"], completions, **{k: plain[k] for k in plain.column_names})
    assert rewards != unprefilled  # without the prefill, "3</vote>" has no opening tag


def test_prefill_vote_without_a_tokenizer_is_a_conversation_ending_in_the_vote_tag():
    dataset = detection_dataset(CONFIG, num_games=1, seed=0, prefill_vote=True)
    assert all(p[-1] == {"role": "assistant", "content": VOTE_PREFILL} for p in dataset["prompt"])
    with pytest.raises(ValueError, match="prefill_vote"):
        detection_dataset(CONFIG, num_games=1, tokenizer="unused")


def test_grpo_trains_on_the_spy_dataset_and_logs_the_envs_rewards(tiny_model_dir, tmp_path):
    from agents import HeuristicAgent

    dataset = spy_dataset(CONFIG, num_games=3, seed=1)
    assert set(dataset["role"]) == {"spy"} and dataset["seat"] == dataset["spy_seat"]
    trainer, optimizer_steps = _train(tiny_model_dir, tmp_path, dataset, GameReward(CONFIG))
    assert trainer.state.global_step == 2 and optimizer_steps == 2
    _check_logged(trainer, dataset, "spy_game", "perform", detector=lambda seed: HeuristicAgent(seed=seed))


def test_rewards_match_the_env_for_chosen_texts_and_junk_is_a_recorded_violation():
    from agents import HeuristicAgent

    votes = detection_dataset(CONFIG, num_games=3, seed=2)
    columns = {k: votes[k] for k in votes.column_names if k != "prompt"}
    texts = [f"<vote>{s + 1}</vote>" for s in votes["spy_seat"]]  # the right answer everywhere
    texts[1] = "\x1b[31m" + "x" * 5000  # junk: no vote tag
    rewards = DetectionReward(CONFIG)(
        votes["prompt"], [[{"role": "assistant", "content": t}] for t in texts], **columns
    )
    assert rewards[0] == 1.0 and rewards[1] < 0
    assert rewards == [pytest.approx(_env_reward(r, t, "vote")) for r, t in zip(votes, texts, strict=True)]
    details = DetectionReward(CONFIG).details(texts, **columns)
    assert details[1]["violations"] and not details[0]["violations"]

    civilians = spy_dataset(CONFIG, num_games=2, seed=3, role="civilian")
    assert set(civilians["role"]) == {"civilian"} and len(civilians) == 2 * 3
    columns = {k: civilians[k] for k in civilians.column_names if k != "prompt"}
    texts = ["The answer is \\boxed{7}.", "", *civilians["performances"][0][2:]] + ["x"] * 2
    got = GameReward(CONFIG)(civilians["prompt"], texts, **columns)
    assert got == GameReward(CONFIG)(civilians["prompt"], texts, **columns)  # seeded per game: repeatable
    want = [
        _env_reward(r, t, "perform", lambda s: HeuristicAgent(seed=s)) for r, t in zip(civilians, texts, strict=True)
    ]
    assert got == pytest.approx(want)


def test_environment_factory_class_plays_one_seat_through_its_tools():
    from agents import HeuristicAgent

    row = spy_dataset(CONFIG, num_games=1, seed=4)[0]
    env = SpyEnvironment(CONFIG)
    assert env.reset(**row) is None  # the row's prompt already asks for the performance
    with pytest.raises(ValueError, match="perform stage"):
        env.vote(1)
    vote_prompt = env.perform(row["performances"][row["seat"]])
    assert "<vote>" in vote_prompt
    outcome = env.vote((row["spy_seat"] + 1) % CONFIG.rules.n_players + 1)
    assert f"Player {row['spy_seat'] + 1}" in outcome
    # the whole round's reward of the seat, as the env computes it with heuristic detectors
    game = spy_env.parallel_env(CONFIG, rounds=1)
    game.reset(seed=row["game_seed"], options={k: row[k] for k in ("document_id", "spy_seat", "degrade_seed")})
    observations = game.step({a: row["performances"][game.seat_of[a]] for a in game.agents})[0]
    others = [a for a in game.agents if game.seat_of[a] != row["seat"]]
    votes = dict(zip(others, HeuristicAgent(seed=row["game_seed"]).act([observations[a] for a in others]), strict=True))
    votes[game.possible_agents[row["seat"]]] = f"<vote>{(row['spy_seat'] + 1) % CONFIG.rules.n_players + 1}</vote>"
    rewards = game.step(votes)[1]
    assert env.get_reward() == pytest.approx(rewards[game.possible_agents[row["seat"]]])


@pytest.mark.slow  # ~60 s: the tool-calling path of TRL
def test_grpo_runs_the_environment_factory_path(tiny_model_dir, tmp_path):
    """TRL's multi-turn tool path with SpyEnvironment: TRL resets it with each row, exposes its tools
    and takes get_reward as the reward. (The random tiny model calls no tool: its seat forfeits.)"""
    import shutil

    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_chat_template

    model_dir = tmp_path / "tool-model"
    shutil.copytree(tiny_model_dir, model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.chat_template = qwen3_chat_template  # a template TRL can parse tool calls from
    tokenizer.save_pretrained(model_dir)
    dataset = spy_dataset(CONFIG, num_games=2, seed=5)
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=12,
        max_steps=2,
        max_tool_calling_iterations=2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=str(model_dir), args=args, train_dataset=dataset, environment_factory=lambda: SpyEnvironment(CONFIG)
    )
    assert {t.__name__ for t in trainer.tools} == {"perform", "vote"}
    trainer.train()
    assert trainer.state.global_step == 2
    by_prompt = {str(r["prompt"]): r for r in dataset}
    for prompt, logged in zip(trainer._logs["prompt"], trainer._logs["rewards"]["SpyEnvironment"], strict=True):
        env = SpyEnvironment(CONFIG)
        env.reset(**by_prompt[str(prompt)])
        assert logged == pytest.approx(env.get_reward())  # the forfeited round, as the env scores it


def _vote_columns(num_games=2, seed=5):
    votes = detection_dataset(CONFIG, num_games=num_games, seed=seed)
    return votes, {k: list(votes[k]) for k in votes.column_names if k != "prompt"}


@pytest.mark.parametrize(("column", "value"), [("spy_seat", -1), ("spy_seat", 4), ("seat", 7), ("seat", True)])
def test_rows_with_seats_out_of_range_are_refused(column, value):
    votes, columns = _vote_columns()
    columns[column][0] = value
    with pytest.raises(ValueError, match=f"row 0 has {column}={value!r}, not a seat of a 4-player game"):
        DetectionReward(CONFIG)(votes["prompt"], ["<vote>4</vote>"] * len(votes), **columns)


def test_rows_record_their_game_and_a_reward_of_another_game_is_a_clear_error():
    votes, columns = _vote_columns()
    assert all(spy_env.GameConfig.from_dict(__import__("json").loads(g)).rules.n_players == 4 for g in columns["game"])
    with pytest.raises(ValueError, match=r"another GameConfig \(differs in \['max_document_chars', 'n_players'\]\)"):
        DetectionReward()(votes["prompt"], ["<vote>1</vote>"] * len(votes), **columns)
    del columns["game"]  # a dataset saved before rows recorded their game: the seat counts still tell
    with pytest.raises(ValueError, match="not one per seat of 5 players"):
        DetectionReward()(votes["prompt"], ["<vote>1</vote>"] * len(votes), **columns)


def test_only_the_models_own_last_assistant_message_is_scored():
    votes, columns = _vote_columns()
    right = [f"<vote>{s + 1}</vote>" for s in votes["spy_seat"]]
    wrong = [f"<vote>{(s + 1) % 4 + 1}</vote>" for s in votes["spy_seat"]]
    completions = [
        [{"role": "assistant", "content": r}, {"role": "user", "content": w}, {"role": "tool", "content": w}]
        for r, w in zip(right, wrong, strict=True)
    ]
    reward = DetectionReward(CONFIG)
    assert (
        reward(votes["prompt"], completions, **columns)
        == reward(votes["prompt"], right, **columns)
        == [1.0] * len(votes)
    )
    only_user = [[{"role": "user", "content": r}] for r in right]
    assert all(d["violations"] == ["missing_vote"] for d in reward.details(only_user, **columns))


@pytest.mark.parametrize("digit", ["\uff11", "\u0661", "\u0967"])  # fullwidth, Arabic-Indic, Devanagari one
def test_non_ascii_digits_are_not_votes(digit):
    votes, columns = _vote_columns()
    details = DetectionReward(CONFIG).details([f"<vote>{digit}</vote>"] * len(votes), **columns)
    assert all(d["violations"] == ["unparseable_vote"] for d in details)


def test_selfplay_dataset_leaves_out_the_spys_own_vote_unless_it_trains():
    """The spy cannot catch itself: its vote row's reward would hold penalties only (no detection), so it
    is left out, as the trainer leaves the spy's vote untrained; ``train_spy_vote`` keeps it."""
    from spyrl.integrations.trl import selfplay_dataset

    config = spy_env.GameConfig(n_players=3, max_document_chars=200)
    env = spy_env.parallel_env(config)
    spies = []
    for g in range(6):
        env.reset(seed=g)
        spies.append(env.reset_options["spy_seat"])
    prompts = [r["prompt"][0]["content"] for r in selfplay_dataset(config, num_games=6, stages=("vote", "perform"))]
    want = [
        f"spyrl self-play: game {g}, player {seat + 1}, {stage}"
        for g in range(6)
        for seat in range(3)
        for stage in ("vote", "perform")
        if not (stage == "vote" and seat == spies[g])
    ]
    assert prompts == want and len(prompts) == 6 * 3 * 2 - 6
    trained = spy_env.GameConfig(n_players=3, max_document_chars=200, train_spy_vote=True)
    assert len(selfplay_dataset(trained, num_games=6, stages=("vote",))) == 18
    with pytest.raises(ValueError, match="no rows"):  # game 0's only seat asked for is its spy
        selfplay_dataset(config, num_games=1, stages=("vote",), seats=[spies[0]])


@pytest.mark.parametrize("stage", ["vote", "perform"])
def test_grpo_trains_from_live_self_play_through_rollout_func(tiny_model_dir, tmp_path, stage):
    """rollout_func plays the games live with the trained model; each reward is spy_env's for its text;
    ``selfplay_caught`` (weight 0) is logged apart: 1 exactly where a vote named the spy."""
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    from agents.rules import RULES, spy_share
    from spyrl.integrations._games import replay_rewards
    from spyrl.integrations.trl import (
        SelfPlayRollout,
        selfplay_caught,
        selfplay_dataset,
        selfplay_reward,
        selfplay_rule_baselines,
    )

    config = spy_env.GameConfig(n_players=3, max_document_chars=200)
    rollout = SelfPlayRollout(config, perform_tokens=6, vote_tokens=4)
    outputs = []

    def recording(prompts, trainer):
        outputs.append(rollout(prompts, trainer))
        return outputs[-1]

    args = _grpo_args(tmp_path, 6)
    reward_funcs = [selfplay_reward, selfplay_caught, *selfplay_rule_baselines()]
    args.reward_weights = [1.0] + [0.0] * (len(reward_funcs) - 1)
    dataset = selfplay_dataset(config, num_games=2, stages=(stage,), seats=[0])
    trainer = GRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=dataset,
        rollout_func=recording,
    )
    trainer.train()
    assert len(outputs) == 2 and trainer.state.global_step == 2
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    logged = [h for h in trainer.state.log_history if "rewards/selfplay/mean" in h]
    for out, history in zip(outputs, logged, strict=True):
        assert history["rewards/selfplay/mean"] == pytest.approx(
            sum(out["selfplay_reward"]) / len(out["selfplay_reward"])
        )
        assert history["reward"] == pytest.approx(history["rewards/selfplay/mean"])  # caught has weight 0
        for ids, text, game, reward, caught in zip(
            out["completion_ids"], out["selfplay_text"], out["selfplay_game"], out["selfplay_reward"],
            out["selfplay_caught"], strict=True,
        ):  # fmt: skip
            prefill = "<vote>" if stage == "vote" else ""
            assert text == prefill + tokenizer.decode(ids, skip_special_tokens=True)
            assert game["stage"] == stage and game["seat"] == 0 and len(game["performances"]) == 3
            if stage == "vote":  # the other seats' live votes are in the game: the reward replays exactly
                want = replay_rewards(config, [game], [text], Stage.VOTE)[0]
                assert reward == pytest.approx(want["reward"])
                assert caught == want["reward_components"]["detect"] and caught in (0.0, 1.0)
            else:
                assert caught is None
        if stage == "vote":
            assert history["rewards/caught/mean"] == pytest.approx(sum(out["selfplay_caught"]) / 4)
            game = out["selfplay_game"][0]  # one game for the group: each rule's share on the same performances
            for name, rule in RULES.items():
                want = spy_share(rule, game["performances"], [1, 2], game["spy_seat"])
                assert history[f"rewards/rule_{name}/mean"] == pytest.approx(want), name


def test_selfplay_caught_needs_the_rollout_and_passes_performances_as_none():
    from spyrl.integrations.trl import selfplay_caught

    assert selfplay_caught([], [], selfplay_caught=[1.0, 0.0, None]) == [1.0, 0.0, None]
    with pytest.raises(ValueError, match="rollout_func"):
        selfplay_caught([], [])


def test_the_live_self_play_example_trains_and_writes_a_checkpoint_only_when_asked(tiny_model_dir, tmp_path):
    """``examples/trl_grpo.py`` as a user runs it (here one step on the tiny model): it trains from live
    games, leaves ``runs/trl-grpo`` without a checkpoint, and saves the model with ``--save``."""
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "trl_grpo.py"
    for extra in ([], ["--save"]):
        cwd = tmp_path / ("save" if extra else "plain")
        cwd.mkdir()
        proc = subprocess.run(
            [sys.executable, str(example), "--steps", "1", "--model", str(tiny_model_dir), *extra],
            cwd=cwd, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "'train_runtime'" in proc.stdout + proc.stderr  # TRL's summary: the step ran
        written = sorted(str(p.relative_to(cwd)) for p in (cwd / "runs").rglob("*") if p.is_file())
        if extra:
            assert "runs/trl-grpo/final/model.safetensors" in written
        else:
            assert written == []  # no checkpoint, no saved model


@pytest.mark.vllm
@pytest.mark.slow
def test_grpo_trainer_trains_with_its_colocated_vllm_engine_kept_in_sync(vllm_tiny_dir, tmp_path, monkeypatch):
    """TRL's GRPOTrainer with ``use_vllm=True`` (colocate) and SelfPlayRollout: the games are sampled by the
    engine, and after the steps the engine's log-probabilities equal the trained model's (TRL syncs before
    each rollout; on a CPU through trainers.vllm_engine.fit_cpu_sync)."""
    pytest.importorskip("vllm")
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from spy_env import GameConfig
    from spyrl.integrations.trl import SelfPlayRollout, selfplay_dataset, selfplay_reward
    from tests.conftest import free_port
    from trainers.vllm_engine import fit_cpu_sync, trl_engine_defaults

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MASTER_PORT", str(free_port()))  # a colocated engine's process group, one per test
    game = GameConfig(n_players=3, max_document_chars=300)
    config = GRPOConfig(
        "runs/trl-grpo", per_device_train_batch_size=4, num_generations=4, max_completion_length=6, max_steps=2,
        learning_rate=1e-2, use_cpu=True, report_to=[], save_strategy="no", seed=0, use_vllm=True,
        vllm_mode="colocate", vllm_max_model_length=4096, bf16=False, model_init_kwargs={"dtype": "float32"},
    )  # fmt: skip
    rollout = SelfPlayRollout(game, perform_tokens=16, vote_tokens=6)
    sampled = []
    with trl_engine_defaults(dtype="float32"):
        trainer = GRPOTrainer(str(vllm_tiny_dir), [selfplay_reward], config, selfplay_dataset(game, num_games=2, stages=("vote",)),
                              rollout_func=rollout)  # fmt: skip
    engine = fit_cpu_sync(trainer.vllm_generation)
    generate = engine.generate
    monkeypatch.setattr(engine, "generate", lambda *a, **k: sampled.append(len(a[0])) or generate(*a, **k))
    trainer.train()
    assert sampled and sum(sampled) >= 2 * 4  # every group's completions came from the engine
    assert trainer.state.global_step == 2
    tok = trainer.processing_class
    prompt = tok.encode("Which player received the degraded copy?", add_special_tokens=False)
    completion = tok.encode(" <vote>2</vote>", add_special_tokens=False)
    ids = prompt + completion

    def engine_logprobs():
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)
        [out] = engine.llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
        return torch.tensor([out.prompt_logprobs[t][ids[t]].logprob for t in range(len(prompt), len(ids))])

    def model_logprobs():
        with torch.no_grad():
            logits = trainer.model(torch.tensor([ids])).logits[0].float()
        rows = torch.arange(len(prompt) - 1, len(ids) - 1)
        return torch.log_softmax(logits, -1)[rows, torch.tensor(completion)]

    with torch.no_grad():  # weights an update could write, pushed as TRL pushes them before each rollout
        for p in trainer.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    stale = engine_logprobs()
    engine.sync_weights()
    assert engine_logprobs() == pytest.approx(model_logprobs(), abs=VLLM_LOGPROB_ATOL)
    assert (engine_logprobs() - stale).abs().max() > 1e-2
