"""The offline ``vllm`` backend (agents/vllm_backend.py) with the real engine.

The tests marked ``vllm`` start real vLLM engines: they need vLLM (on a CPU, `bash
tools/install_vllm_cpu.sh`; CI runs them in that environment) and skip where it is missing. They
share one engine over a tiny Llama whose head size vLLM's CPU attention runs (32), and check what
the engine answers: the ``hf`` backend's prompt ids, the model's own log-probabilities, legal votes
per voter, boxed answers that are always written, seeded runs that repeat.
"""

from __future__ import annotations

import gc
import re

import pytest

from tests.conftest import VLLM_LOGPROB_ATOL

pytest.importorskip("transformers")

import agents
import spy_env
from agents.chat import encode_chat
from agents.decoding import CHARS_PER_TOKEN, DecodingOptions
from agents.hf import HFPolicy
from agents.vllm_backend import VLLMPolicy
from spy_env.parsing import last_boxed, parse_vote
from spy_env.runner import rollout

needs_vllm = pytest.mark.vllm


@pytest.fixture(scope="module")
def engine(vllm_tiny_dir):
    """One engine for the module; each test sets the sampling and decoding it needs."""
    pytest.importorskip("vllm")
    policy = VLLMPolicy(str(vllm_tiny_dir), kv_cache_gib=0.25)
    yield policy
    policy.close()
    del policy
    gc.collect()


def _set(policy: VLLMPolicy, decoding: DecodingOptions | None = None, **sampling) -> VLLMPolicy:
    policy.decoding = decoding or DecodingOptions()
    policy.sampling = agents.SamplingParams(**{"max_new_tokens": 16, "seed": 0, **sampling})
    policy.restart_sampling(policy.sampling.seed)
    return policy


def _observations(n_players: int = 3, seed: int = 0):
    env = spy_env.parallel_env(n_players=n_players)
    performing, _ = env.reset(seed=seed)
    voting, *_ = env.step({a: "Problem: $1+1$. Answer $\\boxed{2}$" for a in env.agents})
    return list(performing.values()), list(voting.values())


def _model_logprobs(model_dir, prompt: list[int], completion: list[int]) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    return [logprobs[t - 1, ids[0, t]].item() for t in range(len(prompt), ids.shape[1])]


@needs_vllm
def test_free_replies_carry_hf_prompt_ids_and_the_models_logprobs(engine, vllm_tiny_dir):
    policy = _set(engine, temperature=1.0, max_new_tokens=12)
    performing, _ = _observations()
    actions = policy.act(performing)
    hf = HFPolicy.from_pretrained(str(vllm_tiny_dir))
    assert [a.prompt_token_ids for a in actions] == [hf.encode(obs) for obs in performing]  # one chat encoding
    for action in actions:
        assert 0 < len(action.completion_token_ids) == len(action.logprobs) <= 12
        assert action.finish_reason in ("stop", "length") and action.completion_mask is None
        expected = _model_logprobs(vllm_tiny_dir, action.prompt_token_ids, action.completion_token_ids)
        assert action.logprobs == pytest.approx(expected, abs=VLLM_LOGPROB_ATOL)  # the engine's float32 = the model's


@needs_vllm
def test_a_restarted_run_repeats_and_identical_prompts_sample_apart(engine):
    policy = _set(engine, temperature=1.0, max_new_tokens=12, seed=3)
    performing, _ = _observations()
    same = [performing[0]] * 4  # civilians share a copy: their prompts may be identical
    first = [a.completion_token_ids for a in policy.act(same)]
    policy.restart_sampling(3)
    assert [a.completion_token_ids for a in policy.act(same)] == first  # request k is seeded seed + k
    assert len({tuple(t) for t in first}) > 1  # ... so the seats of one batch draw apart


@needs_vllm
@pytest.mark.parametrize(
    ("vote_mode", "abstain"), [("constrained", False), ("think-then-vote", True), ("think-then-vote", False)]
)
def test_votes_are_legal_for_each_voter(engine, vote_mode, abstain):
    policy = _set(engine, DecodingOptions(vote_mode, think_tokens=6, abstain=abstain), temperature=1.0)
    _, voting = _observations(4)
    for obs, action in zip(voting, policy.act(voting), strict=True):
        legal = {i + 1 for i, ok in enumerate(obs["vote_targets"]) if ok}
        reasoning, tag = action.text.rsplit("<vote>", 1)
        assert tag.endswith("</vote>") and len(reasoning) <= (CHARS_PER_TOKEN * 6 if vote_mode != "constrained" else 0)
        vote = parse_vote(action.text, len(obs["vote_targets"]))
        assert vote.violation is None and (vote.target + 1 in legal if vote.target is not None else vote.abstain)
        assert abstain or not vote.abstain
        assert len(action.logprobs) == len(action.completion_token_ids)


@needs_vllm
def test_boxed_answers_are_always_written_within_the_budget(engine):
    policy = _set(engine, DecodingOptions(answer="boxed", answer_tokens=4), temperature=1.0, max_new_tokens=40)
    performing, _ = _observations(5)
    for action in policy.act(performing * 2):  # a random tiny model's bodies run out: forced endings
        assert last_boxed(action.text) is not None, action.text
        assert len(action.logprobs) == len(action.completion_token_ids) <= 40


@needs_vllm
def test_a_game_with_shaped_replies_records_logprobs_and_no_violations(engine):
    policy = _set(engine, DecodingOptions("constrained", answer="boxed", answer_tokens=4), max_new_tokens=40)
    buffer = rollout(spy_env.GameConfig(n_players=3), [policy] * 3, 2, seed=0)
    assert len(buffer) == 2 * 3 * 2
    shaped = {"no_answer", "missing_vote", "invalid_vote", "self_vote", "abstain"}  # what the shaping rules out
    assert [v for row in buffer for v in row["violations"] if v in shaped] == []
    assert all(len(row["logprobs"]) == len(row["completion_token_ids"]) > 0 for row in buffer)
    assert all(re.fullmatch(r"<vote>\d</vote>", row["completion"]) for row in buffer if row["stage"] == "vote")


@needs_vllm
def test_a_prompt_too_long_for_the_context_forfeits_alone(engine):
    policy = _set(engine)
    performing, _ = _observations()
    long = {**performing[1], "prompt": performing[1]["prompt"] + " word" * 5000}
    actions = policy.act([performing[0], long, performing[2]])
    assert actions[1].error and "no room in the engine's context of 4096" in actions[1].error
    assert all(a.error is None and a.completion_token_ids for a in (actions[0], actions[2]))


@needs_vllm
def test_bad_options_and_unsupported_models_fail_before_an_engine_starts(tiny_model_dir):
    pytest.importorskip("vllm")
    with pytest.raises(ValueError, match="vote_mode must be one of"):
        VLLMPolicy(str(tiny_model_dir), decoding=DecodingOptions(vote_mode="forced"))
    with pytest.raises(ValueError, match="batch_size"):
        VLLMPolicy(str(tiny_model_dir), batch_size=0)
    from agents.vllm_settings import on_cpu

    if on_cpu():  # the default tiny model's head size is 16
        with pytest.raises(ValueError, match=r"head sizes .* has 16"):
            VLLMPolicy(str(tiny_model_dir))


def test_engine_settings_default_per_device_and_name_bad_values():
    from agents.vllm_settings import engine_kwargs

    cpu = engine_kwargs(dtype="fast", cpu=True, kv_cache_gib=0.5)
    assert cpu["enforce_eager"] and cpu["kv_cache_memory_bytes"] == 2**29 and cpu["max_model_len"] == 4096
    assert engine_kwargs(dtype="fast", cpu=False)["dtype"] == "bfloat16"
    assert "kv_cache_memory_bytes" not in engine_kwargs(cpu=False)  # a GPU sizes it by gpu_memory_utilization
    assert engine_kwargs(cpu=True, enforce_eager=False)["enforce_eager"] is False  # what the caller says wins
    # seeded requests: whole-prompt prefills on a CPU (a chunked one kills the engine); TRL's unseeded engines chunk
    assert cpu["enable_chunked_prefill"] is False and cpu["max_num_batched_tokens"] >= cpu["max_model_len"]
    assert "enable_chunked_prefill" not in engine_kwargs(cpu=True, seeded=False)
    for bad in ({"max_model_len": 1}, {"kv_cache_gib": 0}, {"dtype": "int3"}):
        with pytest.raises(ValueError, match=next(iter(bad)) if "dtype" not in bad else "dtype"):
            engine_kwargs(cpu=True, **bad)


def test_without_vllm_the_install_is_named(monkeypatch):
    import sys

    from agents.vllm_settings import import_vllm

    monkeypatch.setitem(sys.modules, "vllm", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"spyrl\[vllm\].*install_vllm_cpu\.sh"):
        import_vllm()


def test_chat_encoding_folds_a_system_turn_the_template_rejects(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)

    class NoSystem:
        def apply_chat_template(self, messages, **kwargs):
            if any(m["role"] == "system" for m in messages):
                raise ValueError("System role not supported")
            return tokenizer.apply_chat_template(messages, **kwargs)

    messages = [{"role": "system", "content": "Rules."}, {"role": "user", "content": "Play."}]
    folded = encode_chat(NoSystem(), messages)
    assert tokenizer.decode(folded) == "<|im_start|>user\nRules.\n\nPlay.<|im_end|>\n<|im_start|>assistant\n"
    assert encode_chat(tokenizer, messages) != folded  # a template that takes a system turn keeps it
    with pytest.raises(ValueError, match="System role"):
        encode_chat(NoSystem(), messages[:1])  # nothing to fold into


# ------------------------------------------------------------- SmolLM2: the same game as hf
def _smollm2():
    pytest.importorskip("vllm")
    from agents import smollm2

    if not smollm2.is_available():
        pytest.skip(f"needs the SmolLM2 wheel: {smollm2.INSTALL_HINT}")


@needs_vllm
@pytest.mark.slow
def test_smollm2_plays_the_same_greedy_game_on_vllm_and_hf():
    """Constrained votes and free answers: the same tokens, votes and rewards, log-probabilities within
    1e-3 (float32; measured 3e-5). Think-then-vote and boxed answers are bounded in characters on vLLM
    and in tokens on hf, so their texts part where a budget runs out (docs/TRAINING.md#vllm)."""
    _smollm2()
    decoding = DecodingOptions("constrained", answer="free")
    sampling = agents.SamplingParams(temperature=0.0, max_new_tokens=32, seed=0)
    buffers = []
    for spec in ("smollm2", "vllm:smollm2"):
        policy = agents.load(spec, sampling=sampling, decoding=decoding, dtype="float32")
        buffers.append(rollout(spy_env.GameConfig(), [policy] * 5, 1, seed=0))
        if spec.startswith("vllm"):
            policy.close()
    hf, vllm = buffers
    assert [r["completion_token_ids"] for r in vllm] == [r["completion_token_ids"] for r in hf]
    assert [(r["vote"], r["violations"], r["reward"]) for r in vllm] == [
        (r["vote"], r["violations"], r["reward"]) for r in hf
    ]
    for a, b in zip(hf, vllm, strict=True):
        assert b["logprobs"] == pytest.approx(a["logprobs"], abs=1e-3)
        assert b["completion_mask"] == a["completion_mask"] or not any(m == 0 for m in a["completion_mask"])


@needs_vllm
@pytest.mark.slow
def test_spyrl_play_with_the_vllm_backend_finishes_a_five_player_game(tmp_path):
    """The command a user types, in a process of its own (vLLM starts its engine by spawning)."""
    import os
    import subprocess
    import sys

    _smollm2()
    run = subprocess.run(
        [sys.executable, "-m", "spyrl", "play", "--agent", "vllm:smollm2", "--seed", "1", "--max-new-tokens", "48",
         "--out", str(tmp_path / "game.parquet")],
        capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:] + "\n--- stdout ---\n" + run.stdout[-1500:]
    assert "The spy was Player" in run.stdout
    from spy_env.buffer import EpisodeBuffer

    rows = list(EpisodeBuffer.load(tmp_path / "game.parquet"))
    assert len(rows) == 10 and {r["agent_name"] for r in rows} == {"vllm:smollm2"}
    assert all(len(r["logprobs"]) == len(r["completion_token_ids"]) > 0 for r in rows)
