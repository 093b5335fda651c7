"""Exact replays (issue #21, item 4): a buffer row carries its game's full reset options."""

from __future__ import annotations

import pytest

import spy_env
from agents import HeuristicAgent, RandomAgent
from spy_env.buffer import EpisodeBuffer, reset_args
from spy_env.policy import chat_messages
from spy_env.runner import rollout


@pytest.mark.parametrize("replay_setup", [False, True])
def test_every_row_of_a_saved_buffer_recreates_its_prompts(tmp_path, replay_setup):
    config = spy_env.GameConfig(n_players=4, rounds=2, degrade="mask_spans")
    policies = [HeuristicAgent(seed=1), RandomAgent(seed=2), HeuristicAgent(seed=3), RandomAgent(seed=4)]
    buffer = rollout(config, policies, 5, seed=3, games_per_document=2, replay_setup=replay_setup)
    buffer = EpisodeBuffer.load(buffer.save(tmp_path / "b.parquet"))  # through the file, as a user has it
    assert all(r["degrade_seed"] >= 0 for r in buffer)
    for rows in buffer.games().values():
        env = spy_env.parallel_env(config)
        observations, _ = env.reset(**reset_args(rows[0]))
        assert env.game.spy_seat == rows[0]["spy_seat"]
        for stage_rows in _by_stage(rows):
            # the row's prompt is what the re-created game shows that seat now
            assert {r["agent"]: r["prompt"] for r in stage_rows} == {
                a: chat_messages(observations[a]) for a in env.agents
            }
            observations, *_ = env.step({r["agent"]: r["completion"] for r in stage_rows})
        assert env.game.done


def test_options_from_a_row_reproduce_a_game_the_env_drew_itself():
    env = spy_env.make(n_players=5)
    env.reset(seed=11)
    drawn = env.reset_options
    first = env.observe("player_0")["prompt"]
    other = spy_env.make(n_players=5)
    other.reset(seed=999, options=drawn)  # another seed: only the options decide the setup
    assert other.observe("player_0")["prompt"] == first
    assert other.unwrapped.game.spy_seat == drawn["spy_seat"]


def test_a_row_without_options_is_a_clear_error():
    with pytest.raises(ValueError, match="degrade_seed"):
        reset_args({"game_seed": 1, "document_id": "d", "spy_seat": 1, "degrade_seed": -1})


def _by_stage(rows):
    stages: dict[tuple[int, str], list] = {}
    for row in rows:
        stages.setdefault((row["round"], row["stage"]), []).append(row)
    return list(stages.values())
