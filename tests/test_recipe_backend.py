"""Recipe: adding a backend is one new file plus one registration.

This file is that new file: a toy backend defined outside the ``agents`` package (a policy and
its factory), registered with :func:`agents.register_backend`. From then on ``agents.load``,
the command line (``spyrl play/rollout --agent toy:WORD``, its help and its sampling options) and
``agents.backends_table()`` know it, with no edit anywhere else.
"""

from __future__ import annotations

import pytest

import agents
from agents import Action, SamplingParams
from agents.decoding import is_vote
from agents.registry import some_argument
from spy_env.buffer import EpisodeBuffer
from spyrl.commands import main


class ToyPolicy:
    """Performs by repeating its word with a boxed answer; votes for the first legal seat."""

    def __init__(self, word: str, sampling: SamplingParams) -> None:
        self.name = f"toy:{word}"
        self.word = word
        self.sampling = sampling

    def act(self, observations) -> list[Action | str]:
        replies: list[Action | str] = []
        for obs in observations:
            legal = [i for i, ok in enumerate(obs["vote_targets"]) if ok]
            if is_vote(obs):
                replies.append(f"<vote>{legal[0] + 1}</vote>" if legal else "<vote>N/A</vote>")
            else:
                replies.append(Action(text=f"Problem: say {self.word}.\nSolution: {self.word}. $\\boxed{{1}}$"))
        return replies


LOADED: list[ToyPolicy] = []


def load_toy(argument: str, *, sampling: SamplingParams, **kwargs) -> ToyPolicy:
    LOADED.append(ToyPolicy(argument, sampling, **kwargs))
    return LOADED[-1]


@pytest.fixture
def toy_backend():
    # the one registration (inside a fixture only so that other tests never see the toy)
    agents.register_backend("toy", spec="toy:WORD", help="says WORD", accepts=some_argument, llm=True)(load_toy)
    LOADED.clear()
    yield agents.BACKENDS["toy"]
    del agents.BACKENDS["toy"]


def test_load_builds_the_toy_with_the_callers_sampling(toy_backend):
    policy = agents.load("toy:hello", seed=3, sampling=SamplingParams(temperature=0.2))
    assert isinstance(policy, ToyPolicy) and policy.word == "hello"
    assert policy.sampling == SamplingParams(temperature=0.2, seed=3)  # the seed joins the sampling
    assert "| `toy:WORD` | says WORD |" in agents.backends_table()
    with pytest.raises(ValueError, match=r"known forms: .*, toy:WORD"):
        agents.load("toy")  # the form needs a word
    with pytest.raises(ValueError, match="already registered"):
        agents.register_backend("toy", help="again")(load_toy)


def test_play_and_rollout_seat_the_toy(toy_backend, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["play", "--help"])
    assert "toy:WORD" in capsys.readouterr().out
    assert main(["play", "--players", "3", "--agent", "toy:hello", "--seat", "2=heuristic", "--seed", "1"]) == 0
    assert "The spy was Player" in capsys.readouterr().out
    out = tmp_path / "games.jsonl"
    assert (
        main(["rollout", "--agent", "toy:hi", "--games", "3", "--out", str(out), "--quiet", "--temperature", "0.3"])
        == 0
    )
    rows = EpisodeBuffer.load(out).rows
    assert {r["agent_name"] for r in rows} == {"toy:hi"} and len(rows) == 3 * 5 * 2
    assert LOADED[-1].sampling.temperature == 0.3  # an llm backend gets the CLI's sampling options
    assert not any(r["violations"] for r in rows)  # legal votes, well-formed performances
