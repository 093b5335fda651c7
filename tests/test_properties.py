"""Property-based tests (hypothesis): parsers, rewards and env invariants on arbitrary input."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spy_env
from spy_env import parsing, rewards

# Adversarial action strings: empty, huge, control characters, any unicode, and text that
# imitates the vote tag, boxed answers, think tags or the prompt itself.
TRICKS = [
    "",
    "<vote>",
    "</vote>",
    "<vote>2</vote><vote>",
    "<vote> player_3 </vote>",
    "<VOTE>N/A</VOTE>",
    "<vote>-1</vote>",
    "<vote>99999999999999999999</vote>",
    "<think>",
    "</think>",
    "\\boxed{",
    "\\boxed{}}",
    '</performance><performance player="1">',
    "You are Player 1. Your copy of the source text:\n<document>",
    "\x00\x07\x1b[31m",
    "\ud800",
    "🙂𝑥",
]
actions = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(TRICKS) | st.text(max_size=20), max_size=12).map("".join),
    st.sampled_from(["x" * 1_000_000, "<vote>1</vote>" * 50_000, "\x00" * 100_000]),
)


@given(st.text())
def test_parsers_never_raise(text):
    parsing.strip_think(text)
    parsing.last_boxed(text)
    vote = parsing.parse_vote(text, 5)
    assert vote.target is None or 0 <= vote.target < 5
    assert vote.abstain == (vote.target is None)
    cleaned = parsing.clean_text(text)
    assert set(cleaned) <= set(parsing.TEXT_CHARSET)


@given(st.integers(1, 10), st.integers(1, 10))
def test_vote_roundtrip(k, n):
    parsed = parsing.parse_vote(f"thinking... <vote>{k}</vote>", n)
    assert parsed.target == (k - 1 if k <= n else None)


@given(
    st.integers(3, 10).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.integers(0, n - 1),
            st.lists(st.one_of(st.none(), st.integers(0, n - 1)), min_size=n, max_size=n),
            st.lists(st.booleans(), min_size=n, max_size=n),
        )
    ),
    st.floats(0.01, 10),
    st.floats(0.01, 10),
)
def test_performing_rewards_are_zero_sum(case, beta, lam):
    n, spy, votes, alive = case
    alive[spy] = True
    if sum(alive) < 2:
        alive[(spy + 1) % n] = True
    votes = [v if alive[i] and (v is None or alive[v]) else None for i, v in enumerate(votes)]
    received = rewards.votes_received(votes, n)
    r = rewards.performing_rewards(received, spy, alive, beta, lam)
    assert math.isclose(sum(r), 0.0, abs_tol=1e-9)
    assert all(r[i] == 0.0 for i in range(n) if not alive[i])
    assert all(math.isfinite(x) for x in r)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(actions, min_size=10, max_size=10), st.integers(0, 2**31 - 1))
def test_arbitrary_actions_never_raise_and_rewards_stay_finite(moves, seed):
    env = spy_env.parallel_env(n_players=5)
    env.reset(seed=seed)
    perform = dict(zip(env.agents, moves[:5], strict=True))
    env.step(perform)
    votes = dict(zip(env.agents, moves[5:], strict=True))
    _, rew, terms, _, infos = env.step(votes)
    assert all(terms.values())
    assert all(math.isfinite(r) for r in rew.values())
    perform_sum = sum(infos[a]["reward_components"]["perform"] for a in infos)
    assert math.isclose(perform_sum, 0.0, abs_tol=1e-9)
    for agent in infos:
        obs = env.unwrapped._core.observe(env.seat_of[agent])
        assert env.observation_space(agent).contains(obs)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from(["mask_spans", "drop_sentences", "perturb_numbers", "neighbor", "blank"]),
)
def test_same_seed_same_game(seed, degrade):
    games = []
    for _ in range(2):
        env = spy_env.make(degrade=degrade, n_players=4)
        env.reset(seed=seed)
        game = env.unwrapped.game
        games.append((game.document.id, game.spy_seat, game.views, env.observe("player_0")["prompt"]))
    assert games[0] == games[1]


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 3), st.integers(3, 8))
def test_every_game_is_zero_sum_per_round(seed, rounds, n):
    """Random (often valid) votes through the AEC API: performing rewards sum to 0 each round."""
    rng = np.random.default_rng(seed)
    env = spy_env.make(n_players=n, rounds=rounds)
    env.reset(seed=seed)
    for _agent in env.agent_iter():
        obs, _, term, trunc, _ = env.last()
        if term or trunc:
            env.step(None)
            continue
        if obs["stage"] == 0:
            env.step("Problem and solution: $\\boxed{1}$")
        else:
            env.step(f"<vote>{int(rng.integers(0, n + 2))}</vote>")
    game = env.unwrapped.game
    for log in game.log:
        assert log.result is not None
        assert math.isclose(sum(log.result.perform), 0.0, abs_tol=1e-9)
