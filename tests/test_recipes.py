"""The recipes of docs/ARCHITECTURE.md, done exactly as written: a new task and a new degradation,
each defined outside the package (here) and registered with one call, then played end to end.

(The backend recipe is tests/test_recipe_backend.py.)
"""

from __future__ import annotations

import numpy as np
import pytest

from agents import HeuristicAgent
from spy_env import GameConfig
from spy_env.degrade import DEGRADERS, DegradeContext, Degraded, Span, register_degrader
from spy_env.runner import rollout
from spy_env.stage import Stage
from spy_env.tasks import TASKS, Check, Task, register_task

# --- the user's file: a task ------------------------------------------------------------------


def _too_long(shown: str) -> bool:
    return len(shown.split()) > 12


HAIKU = Task(
    name="haiku",
    instruction="write a haiku (at most 12 words) about the source text",
    default_degrade="drop_sentences",
    default_ratio=0.3,
    checks=(Check("too_many_words", _too_long, "penalty_overlength"),),
)


# --- the user's file: a degradation -----------------------------------------------------------


def shout(text: str, rng: np.random.Generator, ctx: DegradeContext) -> Degraded:
    """The spy's copy in capitals: every letter changed, nothing removed."""
    return Degraded(text.upper(), (Span(0, len(text), text, text.upper()),), "shout")


@pytest.fixture
def registered():
    """Register the toy task and degradation for one test, then leave the registries as they were."""
    register_task(HAIKU)
    register_degrader("shout")(shout)
    yield
    del TASKS["haiku"], DEGRADERS["shout"]


def test_a_task_registered_from_outside_is_played_and_checked(registered):
    config = GameConfig(task="haiku", n_players=3)
    assert (
        config.rules.resolved_degrade == "drop_sentences" and config.rules.resolved_ratio == 0.3
    )  # the task's defaults
    buffer = rollout(config, [HeuristicAgent()] * 3, 2, seed=0)
    performances = [r for r in buffer if r["stage"] == Stage.PERFORM]
    assert performances and all(HAIKU.instruction in r["prompt"][0]["content"] for r in performances)
    for row in performances:  # the heuristic writes long problems: the task's own check fires, with its penalty
        long = len(row["completion"].split()) > 12
        assert ("too_many_words" in row["violations"]) == long
        assert "no_answer" not in row["violations"]  # the math task's check is not this task's
        if long:
            assert row["reward_penalty"] == pytest.approx(config.penalties.penalty_overlength)
    assert any("too_many_words" in r["violations"] for r in performances)


def test_a_task_must_charge_a_real_penalty_field(registered):
    with pytest.raises(ValueError, match="penalty_"):
        register_task(Task("bad", "do it", "mask_spans", 0.2, checks=(Check("x", _too_long, "weight_detect"),)))
    register_task(Task("typo", "do it", "mask_spans", 0.2, checks=(Check("x", _too_long, "penalty_nope"),)))
    try:
        with pytest.raises(ValueError, match=r"GameConfig\.rules\.task .*penalty_nope"):
            GameConfig(task="typo")
    finally:
        del TASKS["typo"]
    with pytest.raises(ValueError, match="already registered"):
        register_task(Task("haiku", "something else", "mask_spans", 0.2))


def test_a_degradation_registered_from_outside_degrades_the_spys_copy(registered):
    config = GameConfig(degrade="shout", n_players=3, max_document_chars=400)
    buffer = rollout(config, [HeuristicAgent()] * 3, 3, seed=1)
    for (_, _), rows in buffer.games().items():
        perform = [r for r in rows if r["stage"] == Stage.PERFORM]
        spy = perform[0]["spy_seat"]
        copies = {
            r["seat"]: r["prompt"][-1]["content"].split("<document>\n")[1].split("\n</document>")[0] for r in perform
        }
        assert copies[spy] == copies[spy].upper() != copies[(spy + 1) % 3]  # only the spy's copy shouts
    # the rows name the operator that ran, and the viewer shows that name, not a guess from the diff
    from spyrl.viewer.payload import degradation_of, game_records

    assert {r["degrade"] for r in buffer} == {"shout"}
    games = game_records(list(buffer), {})
    assert [g["deg"] for g in games] == ["shout"] * 3
    assert degradation_of("a b", "A B", [[0, 3, "A B"]]) != "shout"  # what the page guessed before
