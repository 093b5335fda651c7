"""What the framework adapters share: single-seat tasks cut from real games, and exact replays of them.

A *task row* is one seat's prompt at one stage of round 1 of a game played by given agents, with
everything needed to re-create that game (``game_seed``, ``document_id``, ``spy_seat``,
``degrade_seed``) and what the other seats did (``performances``, ``votes``). Replaying a row with
another text in its seat goes through the real environment, so rewards, parsing and penalties are
the environment's own.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import agents
from agents.registry import backend_of
from agents.sampling import SamplingParams
from spy_env.buffer import reset_args
from spy_env.config import GameConfig
from spy_env.env import parallel_env
from spy_env.io import parse_json
from spy_env.policy import Action, Policy
from spy_env.rewards import weighted_reward
from spy_env.runner import Runner
from spy_env.stage import Stage

__all__ = [
    "DetectorSpec",
    "check_rows",
    "completion_text",
    "detector_factory",
    "game_key",
    "game_rows",
    "replay_rewards",
    "seat_factories",
]

# A detector: an agent spec ("heuristic", "hf:PATH", ...), a policy, or game_seed -> policy.
DetectorSpec = str | Policy | Callable[[int], Policy]


def completion_text(completion: Any) -> str:
    """A TRL/OpenAI completion as text: a string, or the content of the model's own last message (the
    last ``assistant`` message; a trailing user or tool message is never read as the model's answer)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return str(completion.get("content") or "") if completion.get("role", "assistant") == "assistant" else ""
    if isinstance(completion, Sequence):
        for message in reversed(completion):
            if isinstance(message, Mapping) and message.get("role", "assistant") == "assistant":
                return str(message.get("content") or "")
    return ""


def game_key(config: GameConfig) -> str:
    """The game a task row belongs to, as a dataset column: its :class:`GameConfig` (round 1) as JSON."""
    return json.dumps(replace(config, rounds=1).to_dict(), sort_keys=True, default=str)


def check_rows(config: GameConfig, rows: Sequence[Mapping[str, Any]], who: str) -> None:
    """Refuse rows that do not belong to ``config``'s game, or whose seats are out of range: a clear
    ``ValueError`` instead of a wrong reward or an ``IndexError``."""
    n, key = config.rules.n_players, game_key(config)
    for i, row in enumerate(rows):
        recorded = row.get("game")
        if recorded is not None and recorded != key:
            theirs, ours = parse_json(str(recorded), f"{who}: row {i}'s game"), json.loads(key)
            if not isinstance(theirs, dict):
                raise ValueError(f"{who}: row {i}'s game is not a GameConfig (a JSON object)")
            fields = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
            raise ValueError(
                f"{who}: row {i} was played with another GameConfig (differs in {fields}); "
                "build the reward with the dataset's config"
            )
        for column in ("seat", "spy_seat"):
            value = row[column]
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < n:
                raise ValueError(f"{who}: row {i} has {column}={value!r}, not a seat of a {n}-player game")
        for column in ("performances", "votes"):
            if len(row[column]) != n:
                raise ValueError(f"{who}: row {i} has {len(row[column])} {column}, not one per seat of {n} players")


def detector_factory(spec: DetectorSpec, sampling: SamplingParams | None = None) -> Callable[[int], Policy]:
    """``seed -> policy``: scripted agents are fresh and seeded per game (a replay's reward does not
    depend on what was replayed before); an LLM spec is loaded once and shared (one batched call),
    with ``sampling`` if given."""
    if callable(spec) and not hasattr(spec, "act"):
        return spec
    if isinstance(spec, str):
        if backend_of(spec).llm:
            shared = agents.load(spec, sampling=sampling)
            return lambda seed: shared
        return lambda seed: agents.load(spec, seed=seed)
    if not hasattr(spec, "act"):
        raise ValueError(f"detectors must be an agent spec, a policy or a function of the game seed, got {spec!r}")
    return lambda seed: spec


def seat_factories(
    specs: Sequence[DetectorSpec], sampling: SamplingParams | None = None
) -> list[Callable[[int], Policy]]:
    """One :func:`detector_factory` per seat; the same spec string shares one (an LLM loads once)."""
    made: dict[str, Callable[[int], Policy]] = {}
    out = []
    for spec in specs:
        if isinstance(spec, str) and spec not in made:
            made[spec] = detector_factory(spec, sampling)
        out.append(made[spec] if isinstance(spec, str) else detector_factory(spec, sampling))
    return out


def game_rows(
    config: GameConfig, performers: str | Sequence[str], num_games: int, seed: int, stage: Stage, roles: Sequence[str]
) -> list[dict[str, Any]]:
    """Round-1 rows of ``stage`` for seats whose role is in ``roles``, from ``num_games`` real games."""
    if num_games < 1:
        raise ValueError(f"num_games must be >= 1, got {num_games}")
    bad = sorted(set(roles) - {"spy", "civilian"})
    if bad or not roles:
        raise ValueError(f"roles must be 'spy' and/or 'civilian', got {list(roles)}")
    specs = [performers] * config.rules.n_players if isinstance(performers, str) else list(performers)
    if len(specs) != config.rules.n_players:
        raise ValueError(
            f"performers: need one agent spec or one per seat ({config.rules.n_players}), got {len(specs)}"
        )
    factories = seat_factories(specs)
    key = game_key(config)
    runner = Runner(replace(config, rounds=1))
    buffer = runner.run(
        lambda i: [make(seed * 1_000_003 + i * 16 + k) for k, make in enumerate(factories)], num_games, seed=seed
    )
    out = []
    for rows in buffer.games().values():
        performances = [
            r["completion"] for r in sorted(rows, key=lambda r: r["seat"]) if r["stage"] == Stage.PERFORM.value
        ]
        votes = [r["completion"] for r in sorted(rows, key=lambda r: r["seat"]) if r["stage"] == Stage.VOTE.value]
        for row in rows:
            if row["stage"] == stage.value and row["round"] == 0 and row["role"] in roles:
                out.append(
                    {
                        "prompt": row["prompt"],
                        "seat": row["seat"],
                        "role": row["role"],
                        "spy_seat": row["spy_seat"],
                        "game_seed": row["game_seed"],
                        "document_id": row["document_id"],
                        "degrade_seed": row["degrade_seed"],
                        "performances": performances,
                        "votes": votes,
                        "game": key,
                    }
                )
    return out


def replay_rewards(
    config: GameConfig,
    rows: Sequence[Mapping[str, Any]],
    texts: Sequence[str],
    stage: Stage,
    detectors: Callable[[int], Policy] | None = None,
) -> list[dict[str, Any]]:
    """Play round 1 of each row's game again with ``texts[i]`` in the row's seat at ``stage``.

    The other seats perform what they performed; at the vote, they vote what they voted (``stage`` is
    the vote) or every seat's vote comes from ``detectors`` (``stage`` is the performance: one batched
    call per detector policy). Returns per row the seat's ``reward`` for that stage (what a buffer row
    of it holds), its ``reward_components`` and ``violations``.
    """
    config = replace(config, rounds=1)
    envs = [parallel_env(config) for _ in rows]
    for env, row in zip(envs, rows, strict=True):
        env.reset(**reset_args(row))
    perform_infos, vote_observations = [], []
    for env, row, text in zip(envs, rows, texts, strict=True):
        own = stage is Stage.PERFORM
        actions = {
            a: text if own and env.seat_of[a] == row["seat"] else row["performances"][env.seat_of[a]]
            for a in env.agents
        }
        observations, _, _, _, infos = env.step(actions)
        perform_infos.append(infos)
        vote_observations.append(observations)
    vote_actions = _votes(envs, rows, texts, vote_observations, stage, detectors)
    out = []
    for env, row, votes, perform_info in zip(envs, rows, vote_actions, perform_infos, strict=True):
        agent = env.possible_agents[row["seat"]]
        info = env.step(votes)[4][agent]
        comps = info["reward_components"]
        if stage is Stage.PERFORM:
            reward = weighted_reward(config, perform=comps["perform"], penalty=comps["perform_penalty"])
            violations = perform_info[agent]["violations"]
        else:
            reward = weighted_reward(config, detect=comps["detect"], penalty=comps["vote_penalty"])
            violations = info["violations"]
        out.append({"reward": float(reward), "reward_components": dict(comps), "violations": list(violations)})
    return out


def _votes(envs, rows, texts, observations, stage: Stage, detectors) -> list[dict[str, str]]:
    if stage is Stage.VOTE:
        return [
            {a: text if env.seat_of[a] == row["seat"] else row["votes"][env.seat_of[a]] for a in env.agents}
            for env, row, text in zip(envs, rows, texts, strict=True)
        ]
    assert detectors is not None
    requests: dict[int, tuple[Policy, list[tuple[int, str]]]] = {}
    for i, (env, row) in enumerate(zip(envs, rows, strict=True)):
        policy = detectors(int(row["game_seed"]))
        for agent in env.agents:
            requests.setdefault(id(policy), (policy, []))[1].append((i, agent))
    votes: list[dict[str, str]] = [{} for _ in envs]
    for policy, items in requests.values():
        batch = [observations[i][agent] for i, agent in items]
        for (i, agent), action in zip(items, policy.act(batch), strict=True):
            votes[i][agent] = Action.of(action).text
    return votes
