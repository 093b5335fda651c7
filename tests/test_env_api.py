"""PettingZoo's own checkers over players × degradation operators × rounds."""

from __future__ import annotations

import itertools
import re
import warnings
from pathlib import Path

import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test
from pettingzoo.utils import BaseWrapper

import spy_env
from spy_env.degrade import DEGRADERS

CASES = list(itertools.product((3, 5, 8), sorted(DEGRADERS), (1, 3)))


def _ids(case):
    n, degrade, rounds = case
    return f"n{n}-{degrade}-r{rounds}"


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # api_test warns that dict observations are not arrays
        yield


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_api(case):
    n, degrade, rounds = case
    api_test(spy_env.make(n_players=n, degrade=degrade, rounds=rounds), num_cycles=30)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_parallel_api(case):
    n, degrade, rounds = case
    parallel_api_test(spy_env.parallel_env(n_players=n, degrade=degrade, rounds=rounds), num_cycles=30)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_seed(case):
    n, degrade, rounds = case
    seed_test(lambda: spy_env.env(n_players=n, degrade=degrade, rounds=rounds), num_cycles=30)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_parallel_seed(case):
    n, degrade, rounds = case
    parallel_seed_test(lambda: spy_env.parallel_env(n_players=n, degrade=degrade, rounds=rounds), num_cycles=30)


def test_registered_with_pettingzoo():
    import pettingzoo

    aec = pettingzoo.make("aec", spy_env.ENV_ID, n_players=4)
    par = pettingzoo.make("parallel", spy_env.ENV_ID, n_players=4)
    assert aec.unwrapped.config.rules.n_players == 4
    assert par.unwrapped.config.rules.n_players == 4
    assert set(par.possible_agents) == {f"player_{i}" for i in range(4)}


# ---- issue #28: the rest of PettingZoo's own test functions, max_cycles, state() and a short repr.
# pettingzoo.test exports: api_test, parallel_api_test, seed_test, parallel_seed_test (above),
# max_cycles_test, render_test, state_test, test_save_obs, performance_benchmark, bombardment_test and
# manual_control_test (here): every one of them runs.


class _Module:
    """What max_cycles_test takes: a module with ``env`` and ``parallel_env`` (3 rounds, so that
    4 stages do not end the game: random text never casts a valid vote, so nobody is eliminated)."""

    @staticmethod
    def env(**kwargs):
        return spy_env.env(n_players=3, rounds=3, **kwargs)

    @staticmethod
    def parallel_env(**kwargs):
        return spy_env.parallel_env(n_players=3, rounds=3, **kwargs)


def test_pettingzoo_max_cycles_test():
    from pettingzoo.test import max_cycles_test

    max_cycles_test(_Module)


def test_max_cycles_truncates_and_pettingzoo_make_passes_it():
    import pettingzoo

    env = pettingzoo.make("parallel", spy_env.ENV_ID, max_cycles=1, n_players=3)
    env.reset(seed=0)
    _, _, terminations, truncations, _ = env.step({a: "text" for a in env.agents})
    assert all(truncations.values()) and not any(terminations.values()) and env.agents == []
    assert pettingzoo.make("aec", spy_env.ENV_ID, max_cycles=2).unwrapped.max_cycles == 2
    with pytest.raises(ValueError, match="max_cycles must be None or an integer >= 1"):
        spy_env.parallel_env(max_cycles=0)


@pytest.mark.parametrize("rounds", [1, 2])
def test_pettingzoo_render_test(rounds):
    from pettingzoo.test import render_test

    render_test(lambda render_mode=None: spy_env.env(n_players=3, rounds=rounds, render_mode=render_mode))


def test_pettingzoo_state_test():
    from pettingzoo.test import state_test

    state_test(spy_env.env(n_players=4, rounds=2), spy_env.parallel_env(n_players=4, rounds=2), num_cycles=10)


def test_state_is_the_games_hidden_facts():
    env = spy_env.parallel_env(n_players=4, rounds=2)
    with pytest.raises(RuntimeError, match="reset"):
        env.state()
    env.reset(seed=0, options={"spy_seat": 2})
    assert env.state().tolist() == [0, 0, 2, 1, 1, 1, 1]
    env.step({a: "text" for a in env.agents})
    assert env.state().tolist()[:3] == [1, 0, 2] and env.state_space.contains(env.state())


def test_observation_space_repr_is_short():
    env = spy_env.parallel_env()
    text = repr(env.observation_space(env.possible_agents[0]))
    assert len(text) < 1_000 and "characters>" in text
    assert len(str(env.action_space(env.possible_agents[0]))) < 200


def test_pettingzoo_make_needs_spy_env_imported_first_as_documented(tmp_path):
    import subprocess
    import sys

    code = "import pettingzoo; pettingzoo.make('aec', 'spy_env/WhoIsTheSpy-v0')"
    alone = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert alone.returncode != 0 and "NamespaceNotFound" in alone.stderr  # PettingZoo has no plugin discovery
    imported = subprocess.run([sys.executable, "-c", "import spy_env; " + code], capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    # and the pages a user reads say so where they show pettingzoo.make
    root = Path(__file__).resolve().parents[1]
    for page in ("README.md", "docs/integrations.md"):
        text = " ".join((root / page).read_text(encoding="utf-8").split())
        assert "import spy_env" in text.split("pettingzoo.make(", 1)[1][:200], page  # next to the call


def test_pettingzoo_save_obs_declines_text_observations(tmp_path, monkeypatch, capsys):
    from pettingzoo.test import test_save_obs

    monkeypatch.chdir(tmp_path)
    test_save_obs(spy_env.env(n_players=3))
    # PettingZoo's own verdict for an environment whose observations are not images: nothing saved
    assert (
        "did not save the observations:  Observations must be Box to save observations as image"
        in capsys.readouterr().out
    )
    assert list(tmp_path.iterdir()) == []


def test_pettingzoo_performance_benchmark_plays_games_for_its_five_seconds(capsys):
    from pettingzoo.test import performance_benchmark

    performance_benchmark(spy_env.env(n_players=3, rounds=2))
    turns = re.search(r"([0-9.e+]+) turns per second", capsys.readouterr().out)
    assert turns and float(turns.group(1)) > 10  # random text every turn, games reset as they end


class _StepReturnsObservation(BaseWrapper):
    """What bombardment_test assumes of an old API: ``step`` returns the next agent's observation (PettingZoo's
    AEC ``step`` returns None, so the unwrapped environment fails it, as PettingZoo's own classic games do)."""

    def step(self, action):
        super().step(action)
        return self.observe(self.agent_selection) if self.agents else None


def test_pettingzoo_bombardment_test():
    from pettingzoo.classic import rps_v2
    from pettingzoo.test import bombardment_test

    for env in (rps_v2.env(), spy_env.env(n_players=3)):
        with pytest.raises(AssertionError, match="outside of its observation space"):
            bombardment_test(env, cycles=2)
    bombardment_test(_StepReturnsObservation(spy_env.env(n_players=3, rounds=2)), cycles=60)


# its keyboard thread presses keys through pynput (X11, for the pixel games; absent here): this text game reads
# lines, which the test types in through input_fn instead
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_pettingzoo_manual_control_test_plays_a_game_from_typed_lines():
    from pettingzoo.test import manual_control_test

    from agents.human import manual_control

    typed = iter(["Problem: add 2 and 2.", "Solution: $\\boxed{4}$", ".", "2", "."] * 4)
    shown: list[str] = []
    totals: dict[str, float] = {}

    def play():
        totals.update(manual_control(input_fn=lambda _: next(typed), print_fn=shown.append, n_players=3, seed=0))

    manual_control_test(play)
    assert set(totals) == {"player_0", "player_1", "player_2"} and sum(totals.values()) > 0
    assert any("PERFORM" in text for text in shown) and any("VOTE" in text for text in shown)
    with pytest.raises(ValueError, match=r"seat must be in 0\.\.2"):
        manual_control(seat=3, n_players=3)
