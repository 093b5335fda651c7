"""Env behaviour beyond PettingZoo's checkers: eliminations, misuse errors, rendering, options."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.test import api_test, seed_test

import spy_env
from spy_env.env import raw_env
from spy_env.parsing import TEXT_CHARSET
from spy_env.policy import chat_messages


class VotingSpace(spaces.Text):
    """A Text space whose samples are plausible moves, so api_test exercises eliminations."""

    def __init__(self, n_players: int) -> None:
        super().__init__(64, min_length=0, charset=TEXT_CHARSET[:200])
        self.n_players = n_players

    def sample(self, mask=None, probability=None) -> str:
        k = int(self.np_random.integers(1, self.n_players + 1))
        return f"$\\boxed{{{k}}}$ <vote>{k}</vote>"


class VotingEnv(raw_env):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._voting_spaces = {a: VotingSpace(self.config.rules.n_players) for a in self.possible_agents}

    def action_space(self, agent):
        return self._voting_spaces[agent]


@pytest.mark.parametrize("n", [3, 5, 8])
def test_api_with_eliminations(n):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = VotingEnv(n_players=n, rounds=n)
        api_test(_wrap(env), num_cycles=50)
        seed_test(lambda: _wrap(VotingEnv(n_players=n, rounds=n)), num_cycles=50)
    # Across many seeds, games must really eliminate players (and, with n > 3, play on after).
    eliminations = eliminated_early = 0
    for seed in range(30):
        env = _wrap(VotingEnv(n_players=n, rounds=n))
        env.reset(seed=seed)
        for agent in env.agent_iter():
            _, _, term, trunc, _ = env.last()
            env.step(None if term or trunc else env.action_space(agent).sample())
        eliminated = env.unwrapped.game.truth()["eliminated"]
        eliminations += sum(e is not None for e in eliminated)
        eliminated_early += sum(e is not None for e in eliminated[:-1])
    assert eliminations > 0
    assert n == 3 or eliminated_early > 0


def _wrap(env):
    from pettingzoo.utils import wrappers

    return wrappers.OrderEnforcingWrapper(env)


def test_misuse_gets_clear_errors():
    env = spy_env.parallel_env()
    with pytest.raises(RuntimeError):
        env.step({})
    env.reset(seed=0)
    with pytest.raises(ValueError, match="missing"):
        env.step({"player_0": "x"})
    with pytest.raises(ValueError, match="unexpected"):
        env.step({**dict.fromkeys(env.agents, "x"), "player_9": "x"})
    env.step(dict.fromkeys(env.agents, "x"))
    env.step(dict.fromkeys(env.agents, "<vote>1</vote>"))
    with pytest.raises(RuntimeError, match="finished"):
        env.step(dict.fromkeys(env.possible_agents, "x"))

    aec = spy_env.make()
    with pytest.raises(Exception, match="reset"):
        aec.step("x")  # OrderEnforcingWrapper: step before reset


def test_non_string_actions_are_violations():
    env = spy_env.parallel_env(n_players=3)
    env.reset(seed=1)
    _, _, _, _, infos = env.step({"player_0": None, "player_1": 42, "player_2": b"bytes"})
    assert all("non_text_action" in infos[a]["violations"] for a in infos)


def test_observation_fields():
    env = spy_env.parallel_env(n_players=4)
    obs, _ = env.reset(seed=3, options={"spy_seat": 1})
    o = obs["player_0"]
    assert o["stage"] == 0 and o["seat"] == 0 and o["round"] == 0
    assert "Player 1" in o["prompt"] and o["copy"] in o["prompt"]
    assert obs["player_1"]["copy"] != o["copy"]  # the spy's copy is degraded
    assert "[…]" in obs["player_1"]["copy"]
    assert chat_messages(o)[1]["content"] == o["prompt"]
    obs, *_ = env.step({a: f"perf of {a} $\\boxed{{1}}$" for a in env.agents})
    o = obs["player_2"]
    assert o["stage"] == 1
    assert list(o["vote_targets"]) == [1, 1, 0, 1]  # no self-vote by default
    assert o["performances"][0] == "perf of player_0 $\\boxed{1}$"
    assert '<performance player="3">' in o["prompt"] and "(you)" not in o["prompt"]
    assert o["prompt"].index("</performance>") < o["prompt"].index("You are Player 3.")
    assert "<vote>" in o["prompt"]


def test_civilians_prompts_differ_only_in_their_tail():
    """Seat-specific text comes last, so a backend can encode the civilians' long common prefix once."""
    env = spy_env.parallel_env(n_players=5, max_document_chars=1_500)
    obs, _ = env.reset(seed=3, options={"spy_seat": 1})
    for _ in range(2):  # the performances, then the votes
        civilians = [obs[f"player_{s}"]["prompt"] for s in (0, 2, 3, 4)]
        shared = os.path.commonprefix(civilians)  # noqa: RUF071 (characters, not path parts)
        assert all(len(p) - len(shared) < 400 for p in civilians)  # the tail: the seat and the legal votes
        assert obs["player_0"]["copy"] in shared
        assert not obs["player_1"]["prompt"].startswith(shared)  # the spy's copy differs
        obs, *_ = env.step({a: f"perf of {a} $\\boxed{{1}}$" for a in env.agents})
    assert obs["player_0"]["performances"][4] in shared


def test_think_is_stripped_before_others_see_it():
    env = spy_env.parallel_env(n_players=3)
    env.reset(seed=0)
    obs, *_ = env.step({a: "<think>my secret plan</think>Problem... $\\boxed{2}$" for a in env.agents})
    assert "secret" not in obs["player_0"]["prompt"]
    assert obs["player_0"]["performances"][1] == "Problem... $\\boxed{2}$"


def test_reset_options_fix_the_setup():
    env = spy_env.parallel_env()
    docs = env.unwrapped._core.documents
    env.reset(seed=1, options={"document_id": docs[7].id, "spy_seat": 4, "degrade_seed": 123})
    first = (env.game.document.id, env.game.spy_seat, env.game.views)
    env.reset(seed=2, options={"document_index": 7, "spy_seat": 4, "degrade_seed": 123})
    assert (env.game.document.id, env.game.spy_seat, env.game.views) == first
    for bad in ({"spy_seat": 5}, {"document_index": 10_000}, {"document_id": "nope"}):
        with pytest.raises(ValueError):
            env.reset(seed=0, options=bad)


def test_spy_seat_is_uniform():
    env = spy_env.parallel_env(n_players=4)
    seats = []
    for seed in range(400):
        env.reset(seed=seed)
        seats.append(env.game.spy_seat)
    counts = np.bincount(seats, minlength=4)
    assert counts.min() > 60  # expected 100 each


def test_render_modes(capsys):
    env = spy_env.make(render_mode="ansi", n_players=3)
    env.reset(seed=0)
    for _agent in env.agent_iter():
        obs, _, term, trunc, _ = env.last()
        if term or trunc:
            env.step(None)
        else:
            env.step("$\\boxed{1}$" if obs["stage"] == 0 else "<vote>1</vote>")
    text = env.render()
    assert isinstance(text, str)
    spy = env.unwrapped.game.spy_seat
    assert f"The spy was Player {spy + 1}" in text
    assert text.count("reward") >= 3

    human = spy_env.make(render_mode="human", n_players=3)
    human.reset(seed=0)
    assert human.render() is None
    assert "Who Is the Spy?" in capsys.readouterr().out
    with pytest.raises(ValueError, match="render_mode"):
        spy_env.make(render_mode="rgb_array")
