"""Votes whose decision is one choice among the legal seats (issue #18): the choice is scored under the
distribution it was drawn from, ``vote_gradient=expected`` is the mean of the sampled estimator, and
``forward_votes`` plays and trains votes with one forward pass each, equal to the generate path."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import spy_env  # noqa: E402
from agents.decoding import DecodingOptions  # noqa: E402
from agents.hf import HFPolicy  # noqa: E402
from agents.sampling import SamplingParams  # noqa: E402
from spy_env.stage import Stage  # noqa: E402
from trainers import SpyRLConfig, SpyRLTrainer  # noqa: E402
from trainers.advantages import AdvantagePipeline  # noqa: E402
from trainers.choices import Choice, choice_loss  # noqa: E402
from trainers.groups import advantage_groups, grouping_of  # noqa: E402
from trainers.logprobs import sequence_logps  # noqa: E402
from trainers.loss import LossScale  # noqa: E402
from trainers.sections import AdvantageConfig  # noqa: E402
from trainers.update import MicroBatch, micro_loss  # noqa: E402
from trainers.votes import ForwardVotes, retained_logps  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_dir)


def vote_observations(n_games=4, n_players=3):
    """Every seat's vote observation in ``n_games`` real games after heuristic performances."""
    from agents import HeuristicAgent

    performer, out = HeuristicAgent(), []
    for seed in range(n_games):
        env = spy_env.parallel_env(spy_env.GameConfig(n_players=n_players, max_document_chars=300))
        observations, _ = env.reset(seed=seed)
        replies = dict(zip(observations, performer.act(list(observations.values())), strict=True))
        votes, *_ = env.step(replies)
        out.extend(votes[a] for a in env.agents)
    return out


def test_the_choice_is_scored_under_its_renormalised_distribution(tiny):
    model, _tokenizer = tiny
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 200, (12,), generator=g).tolist() for _ in range(3)]
    completions = [torch.randint(5, 200, (4,), generator=g).tolist() for _ in range(3)]
    tokens = (17, 18, 19)
    completions[0][2] = 18
    completions[2][1] = 17
    choices = [Choice(2, tokens, (0, 1, 2), 1), None, Choice(1, tokens, (0, 1, 2), 0)]
    with torch.no_grad():
        plain = sequence_logps(model, prompts, completions, 0)
        scored = sequence_logps(model, prompts, completions, 0, choices=choices)
        for row, choice in enumerate(choices):
            logits = model(input_ids=torch.tensor([prompts[row] + completions[row]])).logits[0, len(prompts[row]) - 1 :]
            full = torch.log_softmax(logits, -1)
            if choice is None:
                torch.testing.assert_close(scored.logps[row], plain.logps[row])
                assert scored.choices[row] is None
                continue
            allowed = torch.log_softmax(logits[choice.step, list(tokens)], -1)
            torch.testing.assert_close(scored.choices[row], allowed, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(scored.logps[row, choice.step], allowed[choice.taken], atol=1e-5, rtol=1e-5)
            # the whole-vocabulary log-prob is lower by log P(allowed): what the trainer used to score
            assert plain.logps[row, choice.step] < scored.logps[row, choice.step] - 1e-3
            target = completions[row][choice.step]
            assert float(plain.logps[row, choice.step]) == pytest.approx(float(full[choice.step, target]), abs=1e-5)
            others = [t for t in range(4) if t != choice.step]
            torch.testing.assert_close(scored.logps[row, others], plain.logps[row, others])


def _rows(q: np.ndarray, spies: list[int], votes: np.ndarray, draw: int) -> list[dict]:
    """Vote rows of one draw of 8 votes: three-seat games, each voter choosing among seats (0, 1, 2)."""
    rows = []
    for i, (probs, spy, vote) in enumerate(zip(q, spies, votes, strict=True)):
        rows.append(
            {
                "game_id": draw, "round": 0, "seat": 3 + i, "group_id": draw, "role": "civilian",
                "spy_seat": spy, "vote": int(vote), "reward_detect": float(vote == spy), "reward_penalty": 0.0,
                "reward": float(vote == spy), "vote_probs": [*probs.tolist(), 0.0],
                "choice_step": 0, "choice_token_ids": [17, 18, 19, -1], "completion_token_ids": [17 + int(vote)],
            }
        )  # fmt: skip
    return rows


def _batch(rows, config, choices, coefficients):
    return MicroBatch(
        prompts=[[1]] * len(rows), completions=[r["completion_token_ids"] for r in rows],
        scored=[torch.ones(1)] * len(rows), old_logps=[None] * len(rows), ref_logps=None,
        advantages=[r["advantage"] for r in rows], loss=config.loss.objective("action", config.decoding.max_completion_tokens, config.advantages.vote_gradient),
        scale=LossScale(len(rows), 1),
        choices=choices, old_choices=[None] * len(rows), coefficients=coefficients,
    )  # fmt: skip


def vote_advantages(rows: list[dict], rewards: list[float], advantages: AdvantageConfig, game=None, moments=None):
    """The advantages (N,) and choices' weights the trainer's pipeline gives the votes ``rows`` on one process,
    or, with ``moments``, on one of several processes whose votes' moments add up to those."""
    total = None if moments is None else (lambda _: list(moments))
    pipeline = AdvantagePipeline(advantages, game or SpyRLConfig().game, sum_over_processes=total)
    grouping = advantages.detect_advantage_groups
    whole_batch = grouping_of(grouping).whole_batch
    return pipeline.estimate(rows, rewards, advantage_groups(rows, grouping), Stage.VOTE, whole_batch=whole_batch)


def _choice_gradient(logits: torch.Tensor, rows: list[dict], config: SpyRLConfig) -> torch.Tensor:
    """The trainer's gradient (micro_loss, the advantages of trainers.advantages) at the choice logits of ``rows``
    (row j's vote was cast from prompt j % 8)."""
    z = logits.clone().requires_grad_(True)
    logq_by_prompt = torch.log_softmax(z, -1)  # (8, 3)
    n = len(rows)
    rewards = [r["reward_detect"] for r in rows]
    advantages, weights = vote_advantages(rows, rewards, config.advantages, config.game)
    for row, a in zip(rows, advantages, strict=True):
        row["advantage"] = float(a)
    choices = [Choice.of(r) for r in rows]
    logq = [logq_by_prompt[j % 8] for j in range(n)]
    logps = torch.stack([logq[j][choices[j].taken] for j in range(n)]).unsqueeze(1)  # (B, 1)
    coefficients = [None if w is None else torch.tensor(w, dtype=torch.float32) for w in weights]
    batch = _batch(rows, config, choices, coefficients)
    micro_loss(logps, torch.ones(n, 1), None, logq, batch, lambda loss: loss.backward())
    return z.grad.flatten()


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))


def test_sampled_votes_average_to_the_expected_gradient(tiny):
    """Issue #18: the mean of 4,000 sampled-estimator gradients at the choice token (the trainer's own
    advantages and loss, votes normalised over their batch of 8) points where ``expected``'s does."""
    model, tokenizer = tiny
    observations = vote_observations(3)[:8]
    policy = HFPolicy(
        model, tokenizer, decoding=DecodingOptions("constrained"), sampling=SamplingParams(temperature=1.0, seed=0)
    )
    with torch.no_grad():
        ids = [policy.encode(o) + tokenizer.encode("<vote>", add_special_tokens=False) for o in observations]
        logits = torch.stack([model(input_ids=torch.tensor([x])).logits[0, -1] for x in ids])
    tokens = [tokenizer.encode(str(s), add_special_tokens=False)[0] for s in (1, 2, 3)]
    logits = logits[:, tokens] * 8  # a tiny random model is nearly uniform: sharpen so choices differ
    q = torch.softmax(logits, -1).numpy().astype(np.float64)
    spies = [0, 1, 2, 2, 1, 0, 2, 1]
    config = SpyRLConfig.from_dict(
        dict(vote_mode="constrained", detect_advantage_groups="game", vote_gradient="sampled", beta=0.0)
    )
    rng = np.random.default_rng(0)
    draws = 4000
    rows = []
    for draw in range(draws):
        votes = np.array([rng.choice(3, p=p / p.sum()) for p in q])
        rows.extend(_rows(q, spies, votes, draw))
    sampled = _choice_gradient(logits, rows, config)
    expected_config = SpyRLConfig.from_dict(
        dict(vote_mode="constrained", detect_advantage_groups="game", vote_gradient="expected", beta=0.0)
    )
    expected = _choice_gradient(logits, _rows(q, spies, np.argmax(q, 1), 0), expected_config)
    assert expected.norm() > 0
    assert _cosine(sampled, expected) >= 0.99
    # the test sees a sign flip: the same comparison against the negated gradient fails
    assert _cosine(sampled, -expected) < 0.99
    # and the supervised reference is a different direction: it ignores the model's own probabilities
    supervised_config = SpyRLConfig.from_dict(dict(vote_mode="constrained", vote_gradient="supervised", beta=0.0))
    supervised = _choice_gradient(logits, _rows(q, spies, np.argmax(q, 1), 0), supervised_config)
    assert _cosine(supervised, expected) < 0.99


def test_expected_loss_keeps_ppo_clipping_choice_by_choice():
    """Off-policy: a choice whose ratio left [1-ε, 1+ε] in its advantage's direction stops pulling."""
    old = torch.log(torch.tensor([0.5, 0.5]))
    coefficients = torch.tensor([1.0, -1.0])
    inside = torch.log(torch.tensor([0.55, 0.45])).requires_grad_(True)
    choice_loss(inside, old, coefficients, "expected").backward()
    assert inside.grad.abs().sum() > 0
    outside = torch.log(torch.tensor([0.7, 0.3])).requires_grad_(True)  # ratios 1.4 and 0.6: both clipped
    choice_loss(outside, old, coefficients, "expected").backward()
    assert outside.grad.abs().sum() == 0
    # on-policy it is Σ_k q_k Â_k ∇log q_k
    logq = torch.log(torch.tensor([0.2, 0.8])).requires_grad_(True)
    (-choice_loss(logq, logq.detach(), coefficients, "expected")).backward()
    torch.testing.assert_close(logq.grad, torch.tensor([0.2, -0.8]))


def test_forward_votes_are_the_generated_votes(tiny):
    model, tokenizer = tiny
    observations = vote_observations(3)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16)
    generated = HFPolicy(model, tokenizer, decoding=DecodingOptions("constrained"), sampling=greedy).act(observations)
    forward = ForwardVotes(HFPolicy(model, tokenizer, decoding=DecodingOptions("constrained"), sampling=greedy)).act(
        observations
    )
    for g, f in zip(generated, forward, strict=True):
        assert f.completion_token_ids == g.completion_token_ids and f.text == g.text
        assert f.completion_mask == g.completion_mask
        assert (f.choice_step, dict(f.choice_tokens)) == (g.choice_step, dict(g.choice_tokens))
        assert f.vote_distribution.keys() == g.vote_distribution.keys()
        for k in g.vote_distribution:
            assert f.vote_distribution[k] == pytest.approx(g.vote_distribution[k], abs=1e-5)
        scored = [lp for lp, m in zip(g.logprobs, g.completion_mask, strict=True) if m]
        assert [lp for lp, m in zip(f.logprobs, f.completion_mask, strict=True) if m] == pytest.approx(scored, abs=1e-4)
        assert math.isnan(f.logprobs[-1])  # the forced closing tag is never computed
    with pytest.raises(ValueError, match="constrained"):
        ForwardVotes(HFPolicy(model, tokenizer, decoding=DecodingOptions("think-then-vote")))


@pytest.mark.parametrize("vote_gradient", ["sampled", "expected"])
def test_the_rollouts_forward_feeds_the_same_update_as_a_second_forward(vote_gradient, tmp_path):
    """``forward_votes``: the update read from the rollout's retained graphs has the gradient of the update
    that runs its own forward on the same samples."""
    config = SpyRLConfig.preset(
        "cpu-smoke", output_dir=str(tmp_path), progress=False, keep_buffers=False, forward_votes=True,
        vote_gradient=vote_gradient, updates_per_iteration=1, beta=0.0, stage_schedule="detect",
        detect_advantage_groups="batch",
    )  # fmt: skip
    trainer = SpyRLTrainer(config)
    buffer = trainer.rollouts()
    assert trainer.policy.retained  # the votes kept their graphs
    rows, _ = trainer.select_samples(buffer, Stage.VOTE)
    from trainers.update import TrainingSamples, micro_step

    samples = TrainingSamples.from_samples(rows, config.decoding.max_completion_tokens)
    everything = list(range(len(rows)))
    batch = samples.micro_batch(
        everything,
        config.loss.objective("action", config.decoding.max_completion_tokens, config.advantages.vote_gradient),
        LossScale(len(rows), 1),
    )
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    found = retained_logps(trainer.policy, samples.rows, samples.completions, samples.choices)
    assert found is not None
    micro_loss(found[0], found[1], None, found[2], batch, lambda loss: loss.backward())
    retained = [p.grad.clone() for p in params]
    trainer.model.zero_grad(set_to_none=True)
    trainer.model.train()
    micro_step(trainer.model, batch, config.decoding.temperature, trainer.pad_id, lambda loss: loss.backward())
    recomputed = [p.grad.clone() for p in params]
    assert sum(float(g.abs().sum()) for g in recomputed) > 0
    for a, b in zip(retained, recomputed, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


def test_vote_gradient_and_forward_votes_need_a_choice_to_score():
    with pytest.raises(ValueError, match="vote_gradient"):
        SpyRLConfig.from_dict(dict(vote_gradient="expected", vote_mode="free"))
    with pytest.raises(ValueError, match="vote_gradient"):
        SpyRLConfig.from_dict(dict(vote_gradient="nope", vote_mode="constrained"))
    with pytest.raises(ValueError, match="forward_votes"):
        SpyRLConfig.from_dict(dict(forward_votes=True, vote_mode="think-then-vote"))
    with pytest.raises(ValueError, match="detect_advantage_groups"):
        SpyRLConfig.from_dict(dict(detect_advantage_groups="everything"))
    SpyRLConfig.from_dict(dict(vote_gradient="expected", vote_mode="think-then-vote", detect_advantage_groups="batch"))


def test_batch_groups_normalise_over_every_vote_of_the_iteration():
    """``detect_advantage_groups=batch``: two games whose civilians agree get no gradient from Eq. 5's
    per-game groups, but do when the iteration's votes are normalised together."""
    rows = [{"game_id": g, "round": 0, "role": "civilian"} for g in (0, 0, 1, 1)]
    rewards = [1.0, 1.0, 0.0, 0.0]
    per_game, _ = vote_advantages(rows, rewards, AdvantageConfig(detect_advantage_groups="game"))
    assert per_game.tolist() == [0.0, 0.0, 0.0, 0.0]
    batch, _ = vote_advantages(rows, rewards, AdvantageConfig(detect_advantage_groups="batch"))
    assert batch.round(3).tolist() == [1.0, 1.0, -1.0, -1.0]


def test_expected_refuses_a_temperature_its_recorded_probabilities_do_not_have():
    """``vote_probs`` are recorded at temperature 1 over every legal seat; ``expected`` weights choices by them
    as the behaviour policy, so votes drawn at another temperature or under top-p would be mis-weighted."""
    for bad in ({"temperature": 0.7}, {"temperature": 1.3}, {"top_p": 0.9}):
        with pytest.raises(ValueError, match="vote_gradient"):
            SpyRLConfig.from_dict(dict(vote_gradient="expected", vote_mode="constrained", **bad))
        SpyRLConfig.from_dict(
            dict(vote_gradient="sampled", vote_mode="constrained", **bad)
        )  # the sampled vote is scored as drawn
    SpyRLConfig.from_dict(dict(vote_gradient="supervised", vote_mode="constrained", temperature=0.7))
    assert SpyRLConfig.preset("smollm2-selfplay").decoding.temperature == 1.0


@pytest.mark.parametrize("vote_gradient", ["sampled", "expected"])
def test_batch_groups_split_over_processes_normalise_like_one_process(vote_gradient):
    """Two processes holding halves of an iteration's votes, given the moments every process adds up
    (``vote_moments`` → ``batch_group_stats``), give each vote the advantage one process gives it."""
    from trainers.algorithm import vote_moments
    from trainers.samples import stage_rewards

    config = SpyRLConfig.from_dict(
        dict(detect_advantage_groups="batch", vote_gradient=vote_gradient, vote_mode="constrained")
    )
    rows = []
    for i, (reward, p_spy) in enumerate([(1, 0.9), (1, 0.6), (1, 0.7), (0, 0.2), (0, 0.4), (0, 0.1), (1, 0.5)]):
        rows.append({
            "game_id": i, "round": 0, "role": "civilian", "spy_seat": 1, "reward_detect": float(reward),
            "reward_penalty": 0.0, "reward": float(reward), "choice_step": 0, "choice_token_ids": [7, 8, -1],
            "completion_token_ids": [8 if reward else 7], "vote_probs": [1 - p_spy, p_spy, 0.0],
        })  # fmt: skip
    whole_rewards = stage_rewards(rows, Stage.VOTE, config.advantages, config.game)[0]
    whole, whole_choices = vote_advantages(rows, whole_rewards, config.advantages, config.game)
    halves = [rows[:3], rows[3:]]  # the first process's votes mostly right, the second's mostly wrong
    rewards = [stage_rewards(h, Stage.VOTE, config.advantages, config.game)[0] for h in halves]
    weight = config.game.rewards.weight_detect
    summed = np.sum(
        [vote_moments(h, r, vote_gradient, weight) for h, r in zip(halves, rewards, strict=True)], axis=0
    ).tolist()
    split = [
        vote_advantages(h, r, config.advantages, config.game, summed) for h, r in zip(halves, rewards, strict=True)
    ]
    np.testing.assert_allclose(np.concatenate([a for a, _ in split]), whole, atol=1e-9)
    local = np.concatenate(
        [vote_advantages(h, r, config.advantages, config.game)[0] for h, r in zip(halves, rewards, strict=True)]
    )
    assert np.abs(local - whole).max() > 0.3  # each process's own votes alone: another normalisation
    if vote_gradient == "expected":
        split_choices = [a for _, weights in split for a in weights]
        for a, b in zip(split_choices, whole_choices, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-9)


def test_checkpointed_models_are_recognised(tiny_model_dir):
    """Gradient checkpointing drops the KV cache, so forward votes must know it is on (and then not share)."""
    from transformers import AutoModelForCausalLM

    from trainers.votes import _checkpointed

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    assert not _checkpointed(model)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert _checkpointed(model)


def test_the_trainers_one_update_path_skips_its_own_forward_only_when_the_rollout_kept_the_graphs(
    tmp_path, monkeypatch
):
    """One update path: ``SpyRLTrainer.update`` steps on the kept log-probs (no forward of its own) when a
    forward-vote rollout kept them, and runs its own forward when it did not."""
    import trainers.update

    config = SpyRLConfig.preset(
        "cpu-smoke", output_dir=str(tmp_path), progress=False, keep_buffers=False, forward_votes=True,
        updates_per_iteration=1, beta=0.0, stage_schedule="detect", detect_advantage_groups="batch",
    )  # fmt: skip
    trainer = SpyRLTrainer(config)
    rows, _ = trainer.select_samples(trainer.rollouts(), Stage.VOTE)
    forwards = []
    original = trainers.update.sequence_logps  # the update's own forwards: behaviour log-probs and the step's
    monkeypatch.setattr(
        trainers.update, "sequence_logps", lambda *a, _f=original, **k: forwards.append(1) or _f(*a, **k)
    )
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    assert trainer.update(rows, Stage.VOTE)["losses/optimizer_steps"] == 1
    assert forwards == [] and any(not torch.equal(a, p) for a, p in zip(before, params, strict=True))
    trainer.policy.retained.clear()  # spent: the same samples now need a forward
    assert trainer.update(rows, Stage.VOTE)["losses/optimizer_steps"] == 1
    assert len(forwards) >= 1
