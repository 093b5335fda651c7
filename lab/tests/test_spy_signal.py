"""lab/experiments/spy_signal.py: the spy's texts scored by its own voters and by spy-v1's detectors, and how the
signals correlate within a setup (what selfplay_stages.py --probe reports)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers import experiment_module


@pytest.fixture(scope="module")
def spy_signal():
    return experiment_module("spy_signal")


def _records(values: dict[str, list[float]], setups: list[str]) -> list[dict]:
    keys = list(values)
    return [{"setup": setups[i], "spy_v1_caught": 0.0, **{k: values[k][i] for k in keys}} for i in range(len(setups))]


def test_alignment_correlates_within_setups_only(spy_signal):
    """A signal equal to spy-v1's votes plus a per-setup offset correlates 1 (offsets are centred away); its
    negation −1; a signal that differs only between setups says nothing (no within-setup variation)."""
    setups = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    v1 = [0, 1, 2, 3, 3, 1, 1, 0, 2, 2, 4, 0]
    offset = {"a": 10.0, "b": -5.0, "c": 3.0}
    records = _records(
        {
            "spy_v1": v1,
            "self_expected": [x + offset[s] for x, s in zip(v1, setups, strict=True)],
            "self_sampled": [-x for x in v1],
            "heuristic_in_game": [offset[s] for s in setups],
            "spy_tokens": [1, 2, 3, 4, 4, 3, 2, 1, 1, 1, 1, 1],
        },
        setups,
    )
    out = spy_signal.alignment(records, resamples=200)
    assert out["setups"] == 3 and out["texts"] == 12 and out["spy_v1_varies"] == 1.0
    assert out["self_expected"]["correlation"] == pytest.approx(1.0)
    assert out["self_sampled"]["correlation"] == pytest.approx(-1.0)
    assert out["self_sampled"]["high"] == pytest.approx(-1.0)
    assert math.isnan(out["heuristic_in_game"]["correlation"])
    assert -1.0 <= out["spy_tokens"]["low"] <= out["spy_tokens"]["correlation"] <= out["spy_tokens"]["high"] <= 1.0


def test_spy_signals_on_a_played_buffer_of_scripted_players(spy_signal):
    """Heuristic agents in every seat, two setups each replayed 3 times: one record per game, grouped by setup;
    with voters that record no distribution the expected votes on the spy are the votes cast."""
    from agents.scripted import HeuristicAgent
    from spy_env.config import GameConfig
    from spy_env.runner import Runner

    config = GameConfig(n_players=5, degrade="mask_spans", max_document_chars=600)
    runner = Runner(config, games_per_document=3, replay_setup=True)
    rows = list(runner.run([HeuristicAgent(seed=s) for s in range(5)], 6, seed=3))
    records = spy_signal.spy_signals(rows, config)
    assert len(records) == 6 and len({r["setup"] for r in records}) == 2
    spies = {r["game_id"]: r for r in rows if r["stage"] == "perform" and r["role"] == "spy"}
    for record in records:
        assert record["self_expected"] == record["self_sampled"] == spies[record["game_id"]]["votes_received"]
        assert 0 <= record["spy_v1"] <= 4 and 0 <= record["heuristic_in_game"] <= 4
        assert record["spy_v1_caught"] in (0.0, 1.0)
    out = spy_signal.alignment(records, resamples=50)
    assert out["texts"] == 6 and 0.0 <= out["spy_v1_varies"] <= 1.0
    assert np.isfinite(out["spy_v1_within_std"])
