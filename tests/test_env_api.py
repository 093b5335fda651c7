"""PettingZoo's own checkers over players × degradation operators × rounds."""

from __future__ import annotations

import itertools
import warnings

import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

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
    assert aec.unwrapped.config.n_players == 4
    assert par.unwrapped.config.n_players == 4
    assert set(par.possible_agents) == {f"player_{i}" for i in range(4)}
