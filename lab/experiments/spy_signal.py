"""Does the reward the performing stage gives the spy agree with the detectors spy-v1 scores it by?

Used by ``selfplay_stages.py --probe``. Every spy performance of the probe's training games (one setup
replayed G times, so G different spy texts from the same copy) is scored three ways:

- ``self_expected`` / ``self_sampled``: the suspicion self-play's performing stage rewards it by, the votes
  the model's own voters put on it in that game (expected: Σ of their recorded probabilities on the spy,
  what ``perform_reward=expected`` uses; sampled: the votes cast);
- ``heuristic_in_game``: the votes fixed heuristic detectors give it among the same four civilian texts
  (what the ``perform-reference`` row's performing stage is rewarded by);
- ``spy_v1``: the votes the spy-v1 detectors give it in spy-v1's scene: the same copy, the four civilians
  played by scripted heuristic performers (2–4 salient numbers a seat, seeded as the set's builder does),
  the detectors the heuristic agent seeded by the game (``spyrl/evaluation/leaderboard.py``), and whether
  plurality voting caught it.

A reward can only move the spy toward surviving spy-v1 if, among the texts the spy writes from one copy,
the ones it rewards are the ones spy-v1's detectors spare: the within-setup correlation of each signal
with ``spy_v1`` (each setup's texts centred on their own mean, then pooled; a bootstrap over setups).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from agents.scripted import HeuristicAgent
from spy_env.buffer import reset_args
from spy_env.config import GameConfig
from spy_env.env import parallel_env
from spy_env.rewards import plurality_elimination, votes_received
from spy_env.stage import Stage
from trainers.perform_rewards import expected_votes_received

__all__ = ["alignment", "spy_signals"]

SIGNALS = ("self_expected", "self_sampled", "heuristic_in_game")


def _heuristic_votes(env: Any, texts: Mapping[str, str], spy: str, seed: int) -> list[int | None]:
    """The civilians' votes of the heuristic detector seeded by ``seed`` on ``texts`` (the spy abstains)."""
    observations, *_ = env.step(dict(texts))
    voters = [a for a in env.agents if a != spy]
    replies = dict(zip(voters, HeuristicAgent(seed=seed).act([observations[a] for a in voters]), strict=True))
    _, _, _, _, infos = env.step({**replies, spy: "<vote>N/A</vote>"})
    return [infos[a]["vote"] for a in env.possible_agents]


def _spy_v1_texts(env: Any, observations: Mapping[str, Any], spy_text: str, spy: str, seed: int) -> dict[str, str]:
    """spy-v1's scene for one copy: heuristic civilians (2–4 salient numbers a seat, drawn per game), the spy's text."""
    rng = np.random.default_rng(seed)
    counts = [int(k) for k in rng.integers(2, 5, size=len(env.possible_agents))]
    texts = {}
    for s, agent in enumerate(env.possible_agents):
        performer = HeuristicAgent(seed=seed + s, n_numbers=counts[s])
        texts[agent] = spy_text if agent == spy else performer.act([observations[agent]])[0]
    return texts


def spy_signals(rows: Sequence[Mapping[str, Any]], game: GameConfig) -> list[dict[str, Any]]:
    """One record per game of ``rows`` (a played buffer, first round): its setup and the spy text's signals."""
    games: dict[tuple[Any, Any], list[Mapping[str, Any]]] = {}
    for row in rows:
        if row["round"] == 0:
            games.setdefault((row.get("run_id"), row["game_id"]), []).append(row)
    env = parallel_env(replace(game, rounds=1))
    n = game.rules.n_players
    out = []
    for members in games.values():
        performances = sorted((r for r in members if r["stage"] == Stage.PERFORM), key=lambda r: r["seat"])
        spy_row = next(r for r in performances if r["role"] == "spy")
        seat, seed = int(spy_row["spy_seat"]), int(spy_row["game_seed"])
        spy = env.possible_agents[seat]
        votes = [r for r in members if r["stage"] == Stage.VOTE]
        in_game = {env.possible_agents[r["seat"]]: r["completion"] for r in performances}
        env.reset(**reset_args(spy_row))
        heuristic = votes_received(_heuristic_votes(env, in_game, spy, seed), n)[seat]
        observations, _ = env.reset(**reset_args(spy_row))
        v1 = votes_received(_heuristic_votes(env, _spy_v1_texts(env, observations, in_game[spy], spy, seed), spy, seed), n)  # fmt: skip
        out.append(
            {
                "setup": f"{spy_row['policy_version']}:{spy_row['group_id']}",  # a group_id counts within its rollout
                "game_id": spy_row["game_id"],
                "self_expected": expected_votes_received(votes, n)[seat],
                "self_sampled": float(spy_row["votes_received"]),
                "heuristic_in_game": float(heuristic),
                "spy_v1": float(v1[seat]),
                "spy_v1_caught": float(plurality_elimination(v1, [True] * n) == seat),
                "spy_tokens": len(spy_row["completion_token_ids"]),
            }
        )
    return out


def _centred(records: Sequence[Mapping[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """Each record's ``key`` minus its setup's mean, and the setup index of each."""
    setups = sorted({r["setup"] for r in records})
    index = np.array([setups.index(r["setup"]) for r in records])
    values = np.array([r[key] for r in records], dtype=np.float64)
    means = np.array([values[index == i].mean() for i in range(len(setups))])
    return values - means[index], index


def _correlation(x: np.ndarray, y: np.ndarray) -> float:
    denominator = float(np.sqrt((x * x).sum() * (y * y).sum()))
    return float((x * y).sum() / denominator) if denominator > 0 else float("nan")


def alignment(records: Sequence[Mapping[str, Any]], *, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Within-setup correlation of each signal with ``spy_v1`` (pooled over setups; a 95% bootstrap over
    setups), and how much ``spy_v1`` varies among one setup's texts at all."""
    target, index = _centred(records, "spy_v1")
    setups = int(index.max()) + 1 if len(index) else 0
    rng = np.random.default_rng(seed)
    members = [np.flatnonzero(index == i) for i in range(setups)]
    picks = [
        np.concatenate([members[i] for i in rng.integers(setups, size=setups)]) for _ in range(resamples * bool(setups))
    ]
    out: dict[str, Any] = {
        "setups": setups,
        "texts": len(records),
        "spy_v1_varies": float(np.mean([np.ptp(target[m]) > 0 for m in members])) if setups else 0.0,
        "spy_v1_within_std": float(target.std()) if len(target) else float("nan"),
        "spy_v1_caught": float(np.mean([r["spy_v1_caught"] for r in records])) if records else float("nan"),
    }
    for key in (*SIGNALS, "spy_tokens"):
        signal, _ = _centred(records, key)
        boot = [_correlation(signal[picked], target[picked]) for picked in picks]  # the same resamples for every signal
        finite = [b for b in boot if np.isfinite(b)]  # a resample with no within-setup spread has none
        low, high = np.percentile(finite, [2.5, 97.5]) if finite else (float("nan"),) * 2
        out[key] = {"correlation": _correlation(signal, target), "low": float(low), "high": float(high)}
    return out
