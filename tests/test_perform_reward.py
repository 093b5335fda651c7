"""``advantages.perform_reward=expected`` (trainers/perform_rewards.py): the performing reward with each
seat's votes received replaced by their expectation under the voters' recorded choice distributions."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from spy_env.config import GameConfig  # noqa: E402
from spy_env.rewards import performing_rewards  # noqa: E402
from tests.helpers import fake_trainer  # noqa: E402
from trainers.config import SpyRLConfig  # noqa: E402
from trainers.grpo import SpyRLTrainer  # noqa: E402
from trainers.perform_rewards import expected_perform_rewards, expected_votes_received  # noqa: E402


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """A real iteration's buffer: the ``cpu-smoke`` trainer (the tiny model, constrained votes at temperature 1)
    plays 2 documents × 2 replayed games of 3 players; ``(config, rows)``."""
    config = SpyRLConfig.preset(
        "cpu-smoke", output_dir=str(tmp_path_factory.mktemp("played")), documents_per_iteration=2,
        games_per_document=2, keep_buffers=False, progress=False, report_to=[], perform_reward="expected",
    )  # fmt: skip
    return config, list(SpyRLTrainer(config).rollouts())


def _rounds(rows):
    out: dict = {}
    for row in rows:
        out.setdefault((row["game_id"], row["round"]), []).append(row)
    return out


def test_expected_rewards_are_the_mean_of_the_sampled_rewards_over_the_votes_draw():
    """Five voters with arbitrary distributions (no self-votes, some mass on N/A): the mean of the env's
    performing rewards over 40,000 draws of the votes is the expected reward, seat by seat."""
    rng = np.random.default_rng(0)
    n, spy = 5, 3
    probs = []
    for voter in range(n):
        p = rng.dirichlet(np.ones(n + 1))
        p[voter] = 0.0
        probs.append(p / p.sum())
    rows = [{"game_id": 0, "round": 0, "stage": "perform", "seat": s, "spy_seat": spy} for s in range(n)]
    votes = [
        {"game_id": 0, "round": 0, "stage": "vote", "seat": v, "error": "", "vote": -1, "vote_probs": list(p)}
        for v, p in enumerate(probs)
    ]
    game = GameConfig(n_players=n)
    expected = expected_perform_rewards(rows, rows + votes, game)
    draws = np.stack([[rng.choice(n + 1, p=p) for p in probs] for _ in range(40_000)])
    sampled = np.mean(
        [performing_rewards(np.bincount(d[d < n], minlength=n).tolist(), spy, [True] * n) for d in draws], axis=0
    )
    assert np.asarray(expected) == pytest.approx(sampled, abs=0.02)
    assert sum(expected) == pytest.approx(0.0, abs=1e-12)  # still zero-sum
    assert np.std(expected) > 0.05  # the distributions differ enough for the check to mean something


def test_distributions_that_are_the_cast_votes_give_the_envs_rewards_on_a_real_buffer(played):
    """On a played buffer, replacing each recorded distribution by the one-hot of the vote that was cast
    reproduces the env's ``reward_perform`` exactly: the same formula, alive seats and counting."""
    config, rows = played
    votes = [r for r in rows if r["stage"] == "vote"]
    assert votes and all(len(r["vote_probs"]) == config.game.rules.n_players + 1 for r in votes)  # recorded
    one_hot = []
    for r in rows:
        if r["stage"] == "vote":
            probs = [0.0] * (config.game.rules.n_players + 1)
            probs[r["vote"] if r["vote"] >= 0 else config.game.rules.n_players] = 1.0
            r = {**r, "vote_probs": probs}
        one_hot.append(r)
    performances = [r for r in rows if r["stage"] == "perform"]
    got = expected_perform_rewards(performances, one_hot, config.game)
    assert got == pytest.approx([r["reward_perform"] for r in performances], abs=1e-12)


def test_select_samples_trains_performances_on_the_expected_rewards_by_hand(played):
    """The trainer's own path: with ``perform_reward=expected`` (no RAE, own penalties) each performance's
    advantage is ``w_P r̃^P + w_pen · penalty``, with r̃^P computed here from the recorded ``vote_probs``."""
    base, rows = played
    config = base.with_overrides(["rae=false", "penalty_advantage=own"])
    game = config.game
    n = game.rules.n_players
    by_hand = {}
    for (game_id, _), members in _rounds(rows).items():
        received = np.zeros(n)
        for r in members:
            if r["stage"] == "vote" and not r["error"]:
                received += np.asarray(r["vote_probs"][:n])
        spy = members[0]["spy_seat"]
        civilians = [s for s in range(n) if s != spy]
        gap = received[spy] - received[civilians].mean()
        for r in members:
            if r["stage"] != "perform":
                continue
            s = r["seat"]
            reward = -gap if s == spy else gap / len(civilians) - (received[s] - received[civilians].mean())
            by_hand[(game_id, s)] = (
                game.rewards.weight_perform * reward + game.rewards.weight_penalty * r["reward_penalty"]
            )
    samples, _ = SpyRLTrainer.select_samples(fake_trainer(config), rows, "perform")
    got = {(s.row["game_id"], s.row["seat"]): s.advantage for s in samples}
    assert got == pytest.approx({k: by_hand[k] for k in got}, abs=1e-9)
    sampled, _ = SpyRLTrainer.select_samples(
        fake_trainer(config.with_overrides(["perform_reward=sampled"])), rows, "perform"
    )
    env = {(s.row["game_id"], s.row["seat"]): s.advantage for s in sampled}
    assert max(abs(env[k] - got[k]) for k in got) > 0.05  # the buffer tells the two rewards apart


def test_a_voter_without_a_distribution_counts_its_cast_vote_and_a_forfeit_counts_nothing():
    votes = [
        {"error": "", "vote": 0, "vote_probs": []},  # a scripted voter
        {"error": "timeout", "vote": -1, "vote_probs": []},  # a forfeit
        {"error": "", "vote": 1, "vote_probs": [0.25, 0.0, 0.0, 0.75]},  # a quarter on seat 1, the rest on N/A
    ]
    assert expected_votes_received(votes, 3) == [1.25, 0.0, 0.0]


@pytest.mark.parametrize(
    "overrides",
    [
        ["vote_mode=free", "vote_gradient=sampled"],
        ["temperature=0.7", "vote_gradient=sampled"],
        ["perform_group_norm=true"],
    ],
)
def test_expected_perform_reward_refuses_votes_not_drawn_from_their_recorded_distribution(overrides):
    """And group scaling: RAE-centred advantages over a replay group's std, which continuous rewards make tiny."""
    with pytest.raises(ValueError, match="perform_reward"):
        SpyRLConfig.preset("cpu-smoke", perform_reward="expected").with_overrides(overrides)
