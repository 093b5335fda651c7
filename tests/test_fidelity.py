"""Paper fidelity (issue #10, docs/FIDELITY.md): the qwen3-4b-paper preset trains in the paper's
regime read through verl, and each of the seven findings of the independent review stays fixed."""

from __future__ import annotations

import math
import types
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import spy_env  # noqa: E402
from spy_env.metrics import game_metrics  # noqa: E402
from spy_env.rewards import detection_rewards, performing_rewards, votes_received  # noqa: E402
from spy_env.stage import Stage  # noqa: E402
from tests.helpers import fake_trainer  # noqa: E402
from trainers.algorithm import RAEBaselines, StageController  # noqa: E402
from trainers.config import SpyRLConfig  # noqa: E402
from trainers.grpo import SpyRLTrainer  # noqa: E402
from trainers.loss import LossScale, Objective, clipped_policy_loss, loss_items  # noqa: E402
from trainers.update import mini_batch_size  # noqa: E402

PAPER = "qwen3-4b-paper"


def game_rows(game_id, votes, spy, *, config=None, penalties=None, group_id=None, prompt=None):
    """Episode-buffer rows (both stages) of one game from its votes (``None`` = abstain/invalid)."""
    config = config or SpyRLConfig()
    game = config.game
    n = len(votes)
    received = votes_received(votes, n)
    detect = detection_rewards(votes, spy)
    perform = performing_rewards(received, spy, [True] * n)
    penalties = penalties or [0.0] * n
    rows = []
    for seat in range(n):
        role = "spy" if seat == spy else "civilian"
        for stage, component, reward in (("perform", "reward_perform", perform[seat]), ("vote", "reward_detect", detect[seat])):  # fmt: skip
            penalty = penalties[seat] if stage == "vote" else 0.0
            rows.append({
                "run_id": "r", "game_id": game_id, "group_id": game_id if group_id is None else group_id,
                "round": 0, "stage": stage, "seat": seat, "role": role, "spy_seat": spy, "spy_caught": False,
                "vote": -1 if votes[seat] is None else votes[seat], "violations": ["invalid"] if penalty else [],
                "error": "", "prompt_token_ids": list(prompt or [game_id, seat]), "completion_token_ids": [1, 2],
                "completion_mask": [], "reward_detect": 0.0, "reward_perform": 0.0, component: reward,
                "reward_penalty": penalty, "reward": reward + penalty,
                "trainable": not (role == "spy" and stage == "vote" and not game.rules.train_spy_vote),
            })  # fmt: skip
    return rows


def advantages_by(samples, key="seat"):
    return {s.row[key]: s.advantage for s in samples}


# ---------------------------------------------------------------- finding 1: optimizer steps
def test_paper_preset_makes_one_update_per_iteration():
    paper = SpyRLConfig.preset(PAPER)
    games = paper.rollout.documents_per_iteration * paper.rollout.games_per_document

    def step_size(config, samples):  # samples per optimizer step, as the trainer's updater counts them
        return mini_batch_size(config.update, config.rollout.documents_per_iteration, samples)

    for samples in (games * 5, games * 4, 7):  # performances, votes (civilians only), a few
        assert step_size(paper, samples) == samples
    # the same number in samples is many updates; in documents, verl's unit, two mini-batches of 64
    assert step_size(SpyRLConfig.from_dict(dict(mini_batch_size=128)), 5120) == 128
    halves = SpyRLConfig.from_dict(dict(mini_batch_size=64, mini_batch_unit="documents", micro_batch_size=5))
    assert step_size(halves, 5120) == 2560
    uneven = SpyRLConfig.from_dict(dict(documents_per_iteration=100, mini_batch_size=64, mini_batch_unit="documents"))
    assert step_size(uneven, 500) == 250  # ceil(100 / 64) = 2 updates


# ---------------------------------------------------------------------- finding 2: corpus
def test_paper_preset_streams_nemotron_and_keeps_heldout_documents():
    paper = SpyRLConfig.preset(PAPER)
    assert paper.game.source.corpus == "nemotron:4plus"
    assert paper.run.heldout_fraction == pytest.approx(0.2)
    assert paper.game.source.max_documents * (1 - paper.run.heldout_fraction) >= (
        paper.run.iterations * paper.rollout.documents_per_iteration
    )


@pytest.mark.parametrize("failure", ["no_token", "unreachable"])
def test_nemotron_without_access_says_how_to_fix_it(monkeypatch, failure):
    import huggingface_hub

    import spy_env.corpus as corpus

    def load_dataset(*args, **kwargs):
        if failure == "no_token":
            raise AssertionError("the network must not be touched without a token")
        raise ConnectionError("Couldn't reach 'nvidia/Nemotron-CC-Math-v1' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(corpus, "_datasets", lambda: types.SimpleNamespace(load_dataset=load_dataset))
    if failure == "no_token":
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    else:
        monkeypatch.setenv("HF_TOKEN", "hf_test")
    with pytest.raises(ValueError) as info:
        corpus.load_corpus("nemotron:4plus")
    message = str(info.value)
    assert "\n" not in message
    for needle in ("Nemotron-CC-Math-v1", "HF_TOKEN", "game.corpus", "huggingface.co/datasets"):
        assert needle in message


# -------------------------------------------------------------------- finding 3: RAE warm-up
def test_first_performing_iteration_is_centred_per_role():
    rng = np.random.default_rng(0)
    rows = []
    for game_id in range(64):  # 5 players at ~0.6 accuracy: the spy's r^P is about -1.75 on average
        spy = int(rng.integers(5))
        votes = [spy if rng.random() < 0.6 else int(rng.choice([s for s in range(5) if s != i])) for i in range(5)]
        votes[spy] = int(rng.choice([s for s in range(5) if s != spy]))
        rows += game_rows(game_id, votes, spy)
    trainer = fake_trainer(SpyRLConfig())
    selected, _ = SpyRLTrainer.select_samples(trainer, rows, "perform")
    spy_rewards = [s.row["reward_perform"] for s in selected if s.row["role"] == "spy"]
    assert np.mean(spy_rewards) < -1.0  # the role bias RAE exists to remove
    for role in ("spy", "civilian"):
        mean = np.mean([s.advantage for s in selected if s.row["role"] == role])
        assert mean == pytest.approx(0.0, abs=1e-9), role
    # the cold start stays one flag away
    cold = fake_trainer(SpyRLConfig(), rae=RAEBaselines(alpha=0.9, init="zero"))
    selected, _ = SpyRLTrainer.select_samples(cold, rows, "perform")
    assert np.mean([s.advantage for s in selected if s.row["role"] == "spy"]) < -1.0


@pytest.mark.parametrize("roles", ["spy", "civilian"])
def test_perform_roles_trains_one_roles_performances(roles):
    """``perform_roles``: the other role's performances neither train nor move its RAE baseline."""
    rows = [row for game_id in range(8) for row in game_rows(game_id, [1, 0, 0, 0, 0], spy=game_id % 5)]
    everyone, _ = SpyRLTrainer.select_samples(fake_trainer(SpyRLConfig()), rows, "perform")
    assert {s.row["role"] for s in everyone} == {"spy", "civilian"}
    trainer = fake_trainer(SpyRLConfig.from_dict(dict(perform_roles=roles)))
    selected, _ = SpyRLTrainer.select_samples(trainer, rows, "perform")
    assert {s.row["role"] for s in selected} == {roles}
    assert len(selected) == sum(s.row["role"] == roles for s in everyone)
    assert set(trainer.rae.state_dict()["baselines"]) == {roles}
    votes, _ = SpyRLTrainer.select_samples(trainer, rows, "detect")  # the votes are not its business
    assert {s.row["role"] for s in votes} == {"civilian"}
    with pytest.raises(ValueError, match="perform_roles"):
        SpyRLConfig.from_dict(dict(perform_roles="spies"))


# ------------------------------------------------------------------ finding 4: the spy's vote
def test_paper_preset_trains_the_spys_vote_inside_the_detection_group():
    paper = SpyRLConfig.preset(PAPER)
    game = paper.game
    assert game.rules.train_spy_vote and game.rules.allow_self_vote and paper.advantages.spy_vote_in_group
    # every civilian finds the spy, the spy votes for civilian 1: the old group (civilians only)
    # has identical rewards and no signal; Eq. 5 over all n voters rewards the civilians
    rows = game_rows(0, [4, 4, 4, 4, 1], spy=4, config=paper)
    adv = advantages_by(SpyRLTrainer.select_samples(fake_trainer(paper), rows, "detect")[0])
    assert sorted(adv) == [0, 1, 2, 3, 4]  # the spy's vote trains
    assert all(adv[s] > 0.4 for s in range(4)) and adv[4] < -1.5
    # v ∈ {1..n}: the spy may name itself, which is a correct detection (r^D = 1)
    rows = game_rows(0, [4, 4, 4, 1, 4], spy=4, config=paper)
    adv = advantages_by(SpyRLTrainer.select_samples(fake_trainer(paper), rows, "detect")[0])
    assert adv[4] > 0 and adv[3] < 0
    # each flag alone: an untrained spy's vote still joins the group (spy_vote_in_group) without training
    untrained = SpyRLConfig.preset(PAPER, game={"train_spy_vote": False})
    rows = game_rows(0, [4, 4, 4, 4, 1], spy=4, config=untrained)
    adv = advantages_by(SpyRLTrainer.select_samples(fake_trainer(untrained), rows, "detect")[0])
    assert sorted(adv) == [0, 1, 2, 3] and all(adv[s] == pytest.approx(0.2 / (0.4 + 1e-4)) for s in range(4))
    civilians_only = SpyRLConfig.preset(PAPER, game={"train_spy_vote": False}, spy_vote_in_group=False)
    rows = game_rows(0, [4, 4, 4, 4, 1], spy=4, config=civilians_only)
    adv = advantages_by(SpyRLTrainer.select_samples(fake_trainer(civilians_only), rows, "detect")[0])
    assert sorted(adv) == [0, 1, 2, 3] and all(v == 0.0 for v in adv.values())


def test_an_abstaining_untrained_spy_does_not_stall_the_controller():
    from trainers.algorithm import controller_signals

    rows = []
    for game_id in range(20):  # civilians always right, the (untrained) spy always abstains
        rows += game_rows(game_id, [4, 4, 4, 4, None], spy=4)
    metrics = game_metrics(rows)
    assert metrics["na_rate"] == pytest.approx(0.2)  # > na_low = 0.1 for ever
    controller = StageController(k_min=5)
    stages = [controller.update(*controller_signals(metrics, spy_vote_trained=False)) for _ in range(5)]
    assert stages[-1] is Stage.PERFORM
    # when the spy's vote trains, its abstentions count (training can move them)
    assert controller_signals(metrics, spy_vote_trained=True)[1] == pytest.approx(0.2)


# ------------------------------------------------------------ finding 5: aggregation and KL
def test_paper_preset_uses_verl_token_mean_and_low_var_kl():
    paper = SpyRLConfig.preset(PAPER)
    assert paper.loss.loss_type == "dapo" and paper.loss.kl_estimator == "low_var_kl"


def test_low_var_kl_is_clamped_and_not_ratio_weighted():
    logps = torch.tensor([[-8.0, -1.0, -0.5]], requires_grad=True)  # (B, T)
    old = torch.tensor([[-7.0, -1.2, -0.5]])  # ratios e^-1, e^0.2, 1
    ref = torch.tensor([[-1.0, -1.1, -0.4]])  # ref − logp = 7 (k3 ≈ 1089, clamped to 10), −0.1, 0.1
    mask = torch.ones(1, 3)
    config = Objective(level="token", loss_type="dapo", beta=1.0, kl_estimator="low_var_kl")
    out = clipped_policy_loss(logps, old, torch.zeros(1), mask, config, ref_logps=ref)
    delta = (ref - logps).detach()
    expected = (torch.exp(delta) - delta - 1).clamp(max=10.0)
    assert out.kl == pytest.approx(expected.mean().item(), rel=1e-6)
    assert out.loss.item() == pytest.approx(expected.mean().item(), rel=1e-6)  # A = 0: only the KL term
    k3 = clipped_policy_loss(logps, old, torch.zeros(1), mask, replace(config, kl_estimator="k3"), ref_logps=ref)
    assert k3.kl == pytest.approx(((torch.exp(delta) - delta - 1) * torch.exp(logps - old).detach()).mean().item())
    assert k3.kl > 100  # TRL's form: unclamped, weighted by the ratio
    with pytest.raises(ValueError, match="kl_estimator"):
        SpyRLConfig.from_dict(dict(kl_estimator="k2"))


# ------------------------------------------------------------------------ finding 6: smaller
def test_an_invalid_vote_penalty_does_not_reward_the_other_wrong_votes():
    rows = game_rows(0, [1, 0, 0, 0], spy=3, penalties=[0.0, 0.0, 0.0, -0.1])  # 4 players, all wrong, spy invalid
    config = SpyRLConfig.from_dict(dict(game={"train_spy_vote": True}))
    rows = [{**r, "trainable": True} for r in rows]
    adv = advantages_by(SpyRLTrainer.select_samples(fake_trainer(config), rows, "detect")[0])
    assert adv == pytest.approx({0: 0.0, 1: 0.0, 2: 0.0, 3: -0.1})  # was +0.58 for the three wrong votes


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 4),
    st.lists(st.one_of(st.none(), st.integers(0, 4)), min_size=5, max_size=5),
    st.lists(st.sampled_from([0.0, -0.1, -0.5]), min_size=5, max_size=5),
    st.sampled_from(["detect", "perform"]),
)
def test_penalties_never_move_another_players_advantage(spy, votes, penalties, stage):
    config = SpyRLConfig.from_dict(
        dict(game={"train_spy_vote": True})
    )  # every vote trains, so every voter is in the group
    clean = game_rows(0, votes, spy, config=config)
    fined = game_rows(0, votes, spy, config=config, penalties=penalties)
    if stage == "perform":  # the penalty lands on the performance rows here
        fined = [{**r, "reward_penalty": p, "reward": r["reward"] + p} if r["stage"] == "perform" else r
                 for r, p in zip(fined, [q for q in penalties for _ in (0, 1)], strict=True)]  # fmt: skip
    a = advantages_by(SpyRLTrainer.select_samples(fake_trainer(config), clean, stage)[0])
    b = advantages_by(SpyRLTrainer.select_samples(fake_trainer(config), fined, stage)[0])
    for seat in a:
        if penalties[seat] == 0:
            assert b[seat] == pytest.approx(a[seat], abs=1e-9)
        else:
            assert b[seat] == pytest.approx(a[seat] + penalties[seat], abs=1e-9)


def test_paper_stage_ema_switches_soon_after_accuracy_crosses():
    paper = SpyRLConfig.preset(PAPER)
    controller = StageController(k_min=paper.stages.k_min, ema=paper.stages.stage_ema)
    for _ in range(paper.stages.k_min):
        assert controller.update(0.5, 0.0) is Stage.VOTE
    switched_after = next(k for k in range(1, 40) if controller.update(0.95, 0.0) is Stage.PERFORM)
    assert switched_after <= 5  # ρ = 0.9 took 21


def test_prompt_groups_compare_a_seats_vote_across_replayed_games():
    config = SpyRLConfig.from_dict(dict(detect_advantage_groups="prompt"))
    rows = game_rows(0, [2, 2, 0], spy=2, group_id=7) + game_rows(1, [1, 2, 0], spy=2, group_id=7)
    adv = {(s.row["game_id"], s.row["seat"]): s.advantage for s in SpyRLTrainer.select_samples(fake_trainer(config), rows, "detect")[0]}  # fmt: skip
    assert adv[(0, 0)] > 0 > adv[(1, 0)]  # seat 0 right in game 0, wrong in game 1: one group
    assert adv[(0, 1)] == adv[(1, 1)] == 0.0
    with pytest.raises(ValueError, match="detect_advantage_groups"):
        SpyRLConfig.from_dict(dict(detect_advantage_groups="prompt", replay_setup=False))


def _group_norm_spy(second_game_votes: list[int]) -> tuple[SpyRLConfig, list, list]:
    """``perform_group_norm`` over one replay group of two games (spy in seat 3, b_spy = −2): the
    config, every selected sample, and the spy's samples."""
    config = SpyRLConfig.from_dict(dict(perform_group_norm=True))
    trainer = fake_trainer(config)
    trainer.rae.baselines = {"civilian": 0.0, "spy": -2.0}
    rows = game_rows(0, [2, 0, 0], spy=2, group_id=3) + game_rows(1, second_game_votes, spy=2, group_id=3)
    selected = SpyRLTrainer.select_samples(trainer, rows, "perform")[0]
    return config, selected, [s for s in selected if s.row["role"] == "spy"]


def test_perform_group_norm_keeps_the_rae_baseline():
    config, _, spy = _group_norm_spy([2, 2, 0])
    rewards = np.array([s.row["reward_perform"] for s in spy])  # 0.0 and -1.5: a spread to scale by
    expected = (rewards + 2.0) / (rewards.std() + config.advantages.advantage_eps)
    assert [s.advantage for s in spy] == pytest.approx(expected.tolist())
    assert np.mean(expected) > 0  # group re-centring would have made it 0, discarding b_spy


def test_perform_group_norm_leaves_a_group_of_equal_rewards_unscaled():
    """A replay group whose spy earned the same reward in every game has no spread: its RAE advantages
    stay r − b_spy. Divided by ε alone they were 10,000 times that (the self-play experiment's attempt 2
    saw a gradient norm of 4,448)."""
    _, selected, spy = _group_norm_spy([2, 0, 0])
    rewards = [s.row["reward_perform"] for s in spy]
    assert rewards[0] == rewards[1]
    assert [s.advantage for s in spy] == pytest.approx([r + 2.0 for r in rewards])
    assert all(abs(s.advantage) < 10 for s in selected)


# ------------------------------------------------------------------- finding 7: g(x)'s marker
def test_paper_preset_removes_spans_silently():
    import spy_env

    paper = SpyRLConfig.preset(PAPER)
    env = spy_env.parallel_env(replace(paper.game, corpus="embedded"))
    observations, _ = env.reset(seed=3)
    spy = env.game.spy_seat
    spy_prompt = observations[f"player_{spy}"]["prompt"]
    civilian_prompt = observations[f"player_{(spy + 1) % 5}"]["prompt"]
    assert "[…]" not in spy_prompt and len(spy_prompt) < len(civilian_prompt)
    default_env = spy_env.parallel_env(replace(paper.game, corpus="embedded", mask_placeholder="[…]"))
    observations, _ = default_env.reset(seed=3)
    assert "[…]" in observations[f"player_{spy}"]["prompt"]  # the marked form stays one flag away


# ------------------------------------------------------------------------------- the GPU check
def test_gpu_check_says_it_needs_cuda_and_exits_2(monkeypatch, capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    args = gpu_check.parse_args(["--budget", "300", "--model", "some/folder"])
    assert (args.budget, args.model, args.cpu_dry_run) == (300.0, "some/folder", False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 2
    assert "needs CUDA" in capsys.readouterr().err


def test_paper_preset_plays_each_training_document_once_per_epoch():
    from trainers.documents import epoch_documents

    paper = SpyRLConfig.preset(PAPER)
    assert paper.rollout.document_order == "epoch"
    documents = [f"doc-{i}" for i in range(40)]
    per = 8
    played = [d for step in range(10) for d in epoch_documents(documents, per, step, seed=paper.run.seed)]
    assert sorted(played[:40]) == sorted(documents) and sorted(played[40:]) == sorted(documents)
    assert epoch_documents(documents, per, 3, seed=0) == epoch_documents(documents, per, 3, seed=0)
    assert played[:40] != played[40:] and played[:40] != documents  # shuffled, and reshuffled each epoch
    assert epoch_documents(documents, per, 0, seed=1) != epoch_documents(documents, per, 0, seed=0)  # seeded


def test_samples_pair_rows_with_advantages_without_writing_into_the_buffer():
    import copy
    import dataclasses

    from trainers.samples import Sample

    config = SpyRLConfig.from_dict(
        dict(vote_mode="constrained", vote_gradient="expected", detect_advantage_groups="batch")
    )
    rows = [
        {**r, "completion_mask": [0, 1], "choice_step": 1, "choice_token_ids": [1, 2, 3, -1]}
        for r in game_rows(0, [2, 2, 0], spy=2)
    ]
    before = copy.deepcopy(rows)
    samples, _ = SpyRLTrainer.select_samples(fake_trainer(config), rows, "detect")
    assert rows == before  # no advantage, no choice advantages written into the buffer's rows
    assert samples and all(isinstance(s, Sample) and s.row in rows for s in samples)
    assert all(s.choice_advantages is not None and len(s.choice_advantages) == 3 for s in samples)
    with pytest.raises(dataclasses.FrozenInstanceError):
        samples[0].advantage = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo", "dr_grpo"])
def test_a_vote_is_one_decision_with_one_weight_whatever_its_length(loss_type):
    """Two votes, 10 and 2 tokens, same advantage and ratio: each vote's summed log-prob gets the same
    gradient (no hidden length weighting), and the KL enters as β per vote (β × its summed k3), not β/T."""
    beta = 0.3
    mask = torch.zeros(2, 10)
    mask[0, :] = 1
    mask[1, :2] = 1
    logps = torch.full((2, 10), -1.0, requires_grad=True)
    old = logps.detach().clone()
    config = Objective(level="action", loss_type=loss_type, beta=0.0)
    out = clipped_policy_loss(logps, old, torch.tensor([1.0, 1.0]), mask, config)
    (grad,) = torch.autograd.grad(out.loss, logps)
    assert grad[0, 0].item() == pytest.approx(grad[1, 0].item()) == pytest.approx(-0.5)  # -A / (2 votes)
    assert out.loss.item() == pytest.approx(-1.0)  # the mean of the two votes' -A
    ref = old - 0.5  # k3 = exp(-0.5) + 0.5 - 1 per token
    k3 = math.exp(-0.5) - 0.5
    with_kl = clipped_policy_loss(logps, old, torch.zeros(2), mask, replace(config, beta=beta), ref_logps=ref)
    assert with_kl.loss.item() == pytest.approx(beta * (10 * k3 + 2 * k3) / 2, rel=1e-5)
    dapo = Objective(level="action", loss_type="dapo")  # dapo's mini-batch denominator counts decisions
    half = clipped_policy_loss(logps, old, torch.tensor([1.0, 1.0]), mask, dapo, scale=LossScale(4))
    assert half.loss.item() == pytest.approx(-0.5)
    assert loss_items([torch.ones(10), torch.ones(2), torch.zeros(3)], "action") == 2
    assert loss_items([torch.ones(10), torch.ones(2)], "token") == 12


def test_truncation_keeps_the_last_vote_tag_and_the_boxed_answer():
    """A reply over the character limit is cut from the middle: a long vote keeps its final <vote> (no N/A,
    no invalid-vote penalty, only overlength), a long performance its final \\boxed{} answer."""
    from tests.helpers import GOOD, play_scripted

    env = spy_env.parallel_env(max_vote_chars=200, max_performance_chars=300)
    long_vote = "<vote>1</vote> on second thought " + "reasoning " * 100 + "<vote>3</vote>"
    long_performance = "Problem: $2+3$. " + "step " * 200 + "so $\\boxed{5}$"
    performances = [GOOD, long_performance, GOOD, GOOD, GOOD]
    play_scripted(env, [(performances, [long_vote] * 5)], spy_seat=2)
    log = env.game.log[0]
    votes = log.votes  # by seat
    assert votes[0].target == 2 and votes[0].violations == ("overlength",)
    assert len(votes[0].text) == 200 and votes[0].text.endswith("<vote>3</vote>")
    assert log.performances[1].answer == "5" and len(log.performances[1].text) == 300
    assert log.performances[1].violations == ("overlength",)


def test_character_limits_follow_the_token_budget():
    """The paper preset's 4096-token replies are never cut by characters (8 per token); small budgets keep
    the environment's defaults, and an explicit game.max_vote_chars wins."""
    game = SpyRLConfig.preset(PAPER).game
    assert game.limits.max_vote_chars >= 8 * 4096 and game.limits.max_performance_chars >= 8 * 4096
    small = SpyRLConfig.preset("cpu-smoke").game
    assert (small.limits.max_vote_chars, small.limits.max_performance_chars) == (4000, 8000)
    assert SpyRLConfig.preset(PAPER, game={"max_vote_chars": 500}).game.limits.max_vote_chars == 500


def test_a_bracketed_placeholder_override_stays_a_string():
    """`--set game.mask_placeholder="[…]"` (the documented alternative to silent removal) is the text "[…]",
    not a YAML list; numbers and booleans of other fields still parse."""
    config = SpyRLConfig.preset(PAPER).with_overrides(
        ["game.mask_placeholder=[…]", "beta=0.01", "model.name_or_path=[x]"]
    )
    assert (
        config.game.rules.mask_placeholder == "[…]" and config.loss.beta == 0.01 and config.model.name_or_path == "[x]"
    )


# ------------------------------------------------- issue #30: which group, which memory, on real rows
@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """A real iteration's episode buffer: a ``cpu-smoke`` trainer (the tiny model) plays 3 documents × 3
    replayed games, every voter in Eq. 5's group (the paper's flags); ``(trainer, rows)``."""
    config = SpyRLConfig.preset(
        "cpu-smoke", output_dir=str(tmp_path_factory.mktemp("played")), documents_per_iteration=3,
        games_per_document=3, keep_buffers=False, progress=False, report_to=[], spy_vote_in_group=True,
        game={"n_players": 3, "max_document_chars": 800, "train_spy_vote": True, "allow_self_vote": True},
    )  # fmt: skip
    trainer = SpyRLTrainer(config)
    return trainer, list(trainer.rollouts())


def by_hand(rows, key, eps=1e-4):
    """Eq. 5 by hand: (r − mean)/(population std + ε) over the rows sharing ``key(row)``; {(game, seat): A}."""
    groups = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    out = {}
    for members in groups.values():
        rewards = np.array([m["reward_detect"] for m in members])
        for m, a in zip(members, (rewards - rewards.mean()) / (rewards.std() + eps), strict=True):
            out[(m["game_id"], m["seat"])] = float(a)
    return out


def test_eq5_groups_are_one_games_voters_on_a_real_buffer(played):
    """The trainer's own path (``select_samples`` on a played buffer of several documents, each replayed in 3
    games): each vote's advantage is Eq. 5 over its game's voters, not over every replay of its document;
    ``prompt`` groups are one seat across its document's replays."""
    trainer, rows = played
    votes = [r for r in rows if r["stage"] == "vote"]
    assert len({r["group_id"] for r in votes}) == 3 and len({r["game_id"] for r in votes}) == 9
    per_game = by_hand(votes, lambda r: r["game_id"])
    per_document = by_hand(votes, lambda r: r["group_id"])
    assert max(abs(per_game[k] - per_document[k]) for k in per_game) > 0.5  # the buffer tells the two apart
    got = {(s.row["game_id"], s.row["seat"]): s.advantage for s in trainer.select_samples(rows, "detect")[0]}
    assert sorted(got) == sorted(per_game)  # every voter trains, the spy included
    assert got == pytest.approx(per_game, abs=1e-9)
    prompt = trainer.config.with_overrides(["detect_advantage_groups=prompt"])
    got = {(s.row["game_id"], s.row["seat"]): s.advantage for s in SpyRLTrainer.select_samples(
        fake_trainer(prompt), rows, "detect")[0]}  # fmt: skip
    assert got == pytest.approx(by_hand(votes, lambda r: (r["group_id"], r["seat"])), abs=1e-9)


def test_rae_baselines_remember_across_performing_iterations(played):
    """Three performing iterations through ``select_samples`` (the played buffer's documents as three batches):
    the advantages are ``r − b_role`` with ``b_role`` the first batch's mean, then
    ``b ← α b + (1 − α) r̄_role`` (α = 0.9), computed here by hand; a baseline re-seeded from every batch
    (no memory) gives ``r − r̄_role`` of each batch instead."""
    trainer, rows = played
    config = trainer.config.with_overrides(["rae_init=first_batch", "rae_alpha=0.9", "penalty_advantage=own"])
    fake = fake_trainer(config)
    weight, penalty_weight = config.game.rewards.weight_perform, config.game.rewards.weight_penalty
    baselines: dict[str, float] = {}
    memoryless_gap = 0.0
    for document in sorted({r["group_id"] for r in rows}):
        batch = [r for r in rows if r["group_id"] == document]
        performances = [r for r in batch if r["stage"] == "perform"]
        means = {
            role: weight * float(np.mean([r["reward_perform"] for r in performances if r["role"] == role]))
            for role in ("civilian", "spy")
        }
        for role, mean in means.items():
            baselines.setdefault(role, mean)  # first_batch: seeded once, never again
        penalty = {(r["game_id"], r["seat"]): penalty_weight * r["reward_penalty"] for r in performances}  # own
        expected = {
            (r["game_id"], r["seat"]): weight * r["reward_perform"]
            - baselines[r["role"]]
            + penalty[(r["game_id"], r["seat"])]
            for r in performances
        }
        memoryless = {
            (r["game_id"], r["seat"]): weight * r["reward_perform"]
            - means[r["role"]]
            + penalty[(r["game_id"], r["seat"])]
            for r in performances
        }
        got = {
            (s.row["game_id"], s.row["seat"]): s.advantage
            for s in SpyRLTrainer.select_samples(fake, batch, "perform")[0]
        }
        assert got == pytest.approx(expected, abs=1e-9), document
        memoryless_gap = max(memoryless_gap, max(abs(expected[k] - memoryless[k]) for k in expected))
        for role, mean in means.items():
            baselines[role] = 0.9 * baselines[role] + 0.1 * mean
        assert fake.rae.baselines == pytest.approx(baselines, abs=1e-12)
    assert memoryless_gap > 0.05  # the batches' role means differ: a baseline without memory would show
