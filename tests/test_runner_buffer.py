"""Batched runner and episode buffer: grouping, batching, forfeits, save/load."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import pytest

import agents
from spy_env import GameConfig
from spy_env.buffer import COLUMNS, EpisodeBuffer
from spy_env.metrics import game_metrics
from spy_env.policy import Action
from spy_env.runner import Runner, rollout


class CountingPolicy:
    """Heuristic policy that records the size of every batch it is asked for."""

    def __init__(self, name="counting"):
        self.name = name
        self.inner = agents.load("heuristic")
        self.batches = []

    def act(self, observations):
        self.batches.append(len(observations))
        return [
            Action(
                text=t,
                prompt_token_ids=[1, 2],
                completion_token_ids=[3],
                logprobs=[-0.5],
                finish_reason="stop",
            )
            for t in self.inner.act(observations)
        ]


def test_one_batched_call_per_policy_per_stage():
    a, b = CountingPolicy("a"), CountingPolicy("b")
    buffer = Runner(GameConfig(n_players=5)).run([a, a, b, b, b], 12, seed=0)
    assert a.batches == [24, 24] and b.batches == [36, 36]  # perform + vote, all 12 games at once
    assert len(buffer) == 12 * 2 * 5
    row = buffer.rows[0]
    assert row["prompt_token_ids"] == [1, 2] and row["logprobs"] == [-0.5] and row["finish_reason"] == "stop"
    assert {r["agent_name"] for r in buffer} == {"a", "b"}


def test_rows_carry_rewards_that_match_the_env():
    buffer = rollout(GameConfig(n_players=4), [agents.load("heuristic")] * 4, 20, seed=1)
    per_game = defaultdict(float)
    for row in buffer:
        assert set(row) == set(COLUMNS)
        assert row["role"] in ("spy", "civilian") and row["spy_seat"] >= 0
        expected = (
            row["reward_perform"] + row["reward_penalty"]
            if row["stage"] == "perform"
            else row["reward_detect"] + row["reward_penalty"]
        )
        assert math.isclose(row["reward"], expected)
        if row["stage"] == "perform":
            per_game[row["game_id"]] += row["reward_perform"]
        assert row["trainable"] == (not (row["role"] == "spy" and row["stage"] == "vote"))
    assert all(abs(v) < 1e-9 for v in per_game.values())  # zero-sum performing rewards


def test_games_per_document_and_replay_setup():
    policies = [agents.load("heuristic")] * 5
    buffer = Runner(GameConfig(), games_per_document=4, replay_setup=True).run(policies, 12, seed=0)
    groups = defaultdict(list)
    for row in buffer:
        groups[row["group_id"]].append(row)
    assert len(groups) == 3
    for rows in groups.values():
        assert len({r["document_id"] for r in rows}) == 1
        assert len({r["spy_seat"] for r in rows}) == 1
        for seat in range(5):
            prompts = {str(r["prompt"]) for r in rows if r["seat"] == seat and r["stage"] == "perform"}
            assert len(prompts) == 1  # identical performing prompt across the group
    free = Runner(GameConfig(), games_per_document=4).run(policies, 40, seed=0)
    spy_sets = defaultdict(set)
    for row in free:
        spy_sets[row["group_id"]].add(row["spy_seat"])
    assert any(len(s) > 1 for s in spy_sets.values())  # without replay_setup, setups differ


@pytest.mark.parametrize("replay_setup", [True, False])
def test_balanced_spy_seats_put_the_spy_in_every_seat_of_each_round_and_change_nothing_else(replay_setup):
    policies = [agents.load("heuristic")] * 5
    kwargs = dict(games_per_document=2, replay_setup=replay_setup)
    drawn = Runner(GameConfig(n_players=5), **kwargs).run(policies, 24, seed=3)
    balanced = Runner(GameConfig(n_players=5), spy_seats="balanced", **kwargs).run(policies, 24, seed=3)

    def games(buffer):
        return {r["game_id"]: r for r in buffer if r["stage"] == "perform" and r["seat"] == 0}

    drawn, balanced = games(drawn), games(balanced)
    unit = "group_id" if replay_setup else "game_id"
    units = {}
    for row in balanced.values():
        units.setdefault(row[unit], row["spy_seat"])
    seats = [units[u] for u in sorted(units)]
    assert len(seats) == (12 if replay_setup else 24)
    for start in range(0, len(seats) - 4, 5):  # every round of five units: each seat once
        assert sorted(seats[start : start + 5]) == [0, 1, 2, 3, 4]
    same = ("document_id", "game_seed", "degrade_seed")
    for game_id, row in balanced.items():  # the same deal otherwise: document, masks and game seed
        assert [row[k] for k in same] == [drawn[game_id][k] for k in same]
    with pytest.raises(ValueError, match="spy_seats"):
        Runner(GameConfig(), spy_seats="even")


def test_a_spy_policy_holds_every_spy_seat_and_only_its_rows_train():
    scene, spy = CountingPolicy("scene"), CountingPolicy("spy")
    buffer = Runner(GameConfig(n_players=5), games_per_document=2, replay_setup=True).run(
        [scene] * 5, 8, seed=3, spy=spy
    )
    assert len({r["spy_seat"] for r in buffer}) > 1  # the spy's seat moves between setups; the spy policy follows
    for row in buffer:
        is_spy = row["seat"] == row["spy_seat"]
        assert row["agent_name"] == ("spy" if is_spy else "scene")
        assert row["trainable"] == (is_spy and row["stage"] == "perform")  # the spy's vote is untrained by default
    assert spy.batches == [8, 8] and scene.batches == [32, 32]  # still one batched call per policy and stage
    plain = Runner(GameConfig(n_players=5)).run([scene] * 5, 2, seed=3)
    assert all(r["trainable"] for r in plain if r["stage"] == "perform")  # without a spy policy every seat trains


def test_failing_policies_become_forfeits_and_lose_no_rows():
    class Broken:
        name = "broken"

        def act(self, observations):
            raise ConnectionError("server went away")

    class Short:
        name = "short"

        def act(self, observations):
            return ["<vote>1</vote>"]

    heuristic = agents.load("heuristic")
    buffer = rollout(GameConfig(n_players=5), [heuristic, Broken(), heuristic, Short(), heuristic], 8, seed=0)
    assert len(buffer) == 8 * 2 * 5
    errors = Counter(r["agent_name"] for r in buffer if r["error"])
    assert errors == {"broken": 16, "short": 16}
    broken = [r for r in buffer if r["agent_name"] == "broken"]
    assert all("server went away" in r["error"] for r in broken)
    assert all(r["violations"] for r in broken)  # an empty action is a recorded violation
    assert game_metrics(buffer)["forfeit_rate"] == pytest.approx(32 / 80)


def test_deterministic_given_seed():
    def run():
        return [
            (r["document_id"], r["spy_seat"], r["completion"], r["reward"])
            for r in rollout(GameConfig(), [agents.load("random", seed=3)] * 5, 10, seed=5, run_id="x")
        ]

    assert run() == run()


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_save_load_roundtrip(tmp_path, suffix):
    buffer = rollout(GameConfig(n_players=3), [CountingPolicy()] * 3, 4, seed=0)
    path = buffer.save(tmp_path / f"buf{suffix}")
    loaded = EpisodeBuffer.load(path)
    assert len(loaded) == len(buffer)
    for a, b in zip(buffer.rows, loaded.rows, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if key == "logprobs":
                assert a[key] == pytest.approx(b[key])
            else:
                assert a[key] == b[key], key
    ds = loaded.to_dataset()
    assert ds[0]["prompt"][0]["role"] == "system" and ds.features == EpisodeBuffer().to_dataset().features


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "buf.parquet"
    good = rollout(GameConfig(n_players=3), [agents.load("random")] * 3, 2, seed=0)
    good.save(path)
    before = path.read_bytes()

    import datasets

    def explode(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(datasets.Dataset, "to_parquet", explode)
    with pytest.raises(OSError):
        rollout(GameConfig(n_players=3), [agents.load("random")] * 3, 5, seed=1).save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["buf.parquet"]  # no temp file left behind
    with pytest.raises(ValueError, match=r"parquet or \.jsonl"):
        good.save(tmp_path / "buf.csv")


def test_agent_specs():
    assert agents.load("random:7").name == "random"
    for bad in ("", "gpt-17", "random:x"):
        with pytest.raises(ValueError):
            agents.load(bad)
