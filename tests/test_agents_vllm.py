"""The offline ``vllm`` backend (agents/vllm_backend.py) on a machine without vLLM.

vLLM needs CUDA, so a stand-in ``vllm`` module records what the policy asks of the engine (the
prompt token ids, one ``SamplingParams`` per request and its structured-output pattern) and
answers with text that honours the pattern. The tests check those requests: the same prompt ids
as the ``hf`` backend, the vote and answer options of :class:`agents.decoding.DecodingOptions`
per voter, and a boxed body that ran out being continued with a forced ending.
"""

from __future__ import annotations

import re
import sys
import types

import pytest

pytest.importorskip("transformers")

import agents
import spy_env
from agents.chat import encode_chat
from agents.decoding import CHARS_PER_TOKEN, DecodingOptions, boxed_answer_regex, boxed_body_regex
from agents.hf import HFPolicy
from agents.vllm_backend import VLLMPolicy
from spy_env.parsing import last_boxed
from spy_env.runner import rollout


class _Logprob:
    def __init__(self, logprob: float) -> None:
        self.logprob = logprob


class FakeLLM:
    """``vllm.LLM`` without a GPU: replies satisfy each request's pattern; every call is recorded."""

    instances: list[FakeLLM] = []

    def __init__(self, model: str, **engine_kwargs) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.engine_kwargs = engine_kwargs
        self.calls: list[tuple[list[list[int]], list[dict]]] = []
        FakeLLM.instances.append(self)

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, params, use_tqdm=True):
        assert use_tqdm is False and len(params) == len(prompts)
        self.calls.append(([list(p["prompt_token_ids"]) for p in prompts], [p.kwargs for p in params]))
        return [self._output(p.kwargs) for p in params]

    def _output(self, kwargs: dict):
        regex = kwargs["structured_outputs"].regex if "structured_outputs" in kwargs else None
        finish = "stop"
        if regex is None:
            text = "free text"
        elif "<vote>" in regex:
            text = "<vote>" + re.search(r"\(\?:([^|)]+)", regex).group(1) + "</vote>"
        elif regex == boxed_body_regex():  # a body that never writes its answer runs out
            text, finish = " ".join(["word"] * kwargs["max_tokens"]), "length"
        else:
            text = "\n\n\\boxed{7}"
        ids = self.tokenizer.encode(text, add_special_tokens=False)[: kwargs["max_tokens"]]
        completion = types.SimpleNamespace(
            token_ids=ids,
            logprobs=[{t: _Logprob(-0.5)} for t in ids],
            text=self.tokenizer.decode(ids),
            finish_reason=finish,
        )
        return types.SimpleNamespace(outputs=[completion])


class _Recorded:
    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs


@pytest.fixture
def fake_vllm(monkeypatch):
    vllm = types.ModuleType("vllm")
    vllm.LLM = FakeLLM
    vllm.SamplingParams = _Recorded
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict
    sampling_params = types.ModuleType("vllm.sampling_params")
    sampling_params.StructuredOutputsParams = types.SimpleNamespace
    vllm.inputs, vllm.sampling_params = inputs, sampling_params
    for name, module in (("vllm", vllm), ("vllm.inputs", inputs), ("vllm.sampling_params", sampling_params)):
        monkeypatch.setitem(sys.modules, name, module)
    FakeLLM.instances.clear()
    return FakeLLM.instances


def _observations(n_players: int = 3, seed: int = 0):
    env = spy_env.parallel_env(n_players=n_players)
    performing, _ = env.reset(seed=seed)
    voting, *_ = env.step({a: "Problem: $1+1$. Answer $\\boxed{2}$" for a in env.agents})
    return list(performing.values()), list(voting.values())


def test_free_replies_send_hf_prompt_ids_and_the_sampling(fake_vllm, tiny_model_dir):
    sampling = agents.SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=20, seed=5)
    policy = agents.load(f"vllm:{tiny_model_dir}", sampling=sampling, gpu_memory_utilization=0.5)
    hf = HFPolicy.from_pretrained(str(tiny_model_dir))
    performing, voting = _observations()
    actions = policy.act(performing)
    policy.act(voting)
    [engine] = fake_vllm
    assert engine.engine_kwargs == {"gpu_memory_utilization": 0.5}
    (prompts, params), (_, vote_params) = engine.calls
    assert prompts == [hf.encode(obs) for obs in performing]  # one chat encoding for hf and vLLM
    assert params[0] == {"n": 1, "temperature": 0.7, "top_p": 0.9, "top_k": -1, "max_tokens": 20, "seed": 5,
                         "logprobs": 0}  # fmt: skip
    assert vote_params[0]["seed"] == 6 and "structured_outputs" not in vote_params[0]  # free votes, next call
    assert actions[0].text == "free text" and actions[0].logprobs == [-0.5] * len(actions[0].completion_token_ids)
    assert actions[0].prompt_token_ids == prompts[0] and actions[0].completion_mask is None


@pytest.mark.parametrize(
    ("vote_mode", "abstain", "think"), [("constrained", True, ""), ("think-then-vote", True, "[^<]{0,24}")]
)
def test_votes_are_constrained_per_voter(fake_vllm, tiny_model_dir, vote_mode, abstain, think):
    policy = VLLMPolicy(str(tiny_model_dir), decoding=DecodingOptions(vote_mode, think_tokens=6, abstain=abstain))
    _, voting = _observations(4)
    actions = policy.act(voting)
    [(_, params)] = fake_vllm[0].calls
    for obs, request, action in zip(voting, params, actions, strict=True):
        seats = [str(i + 1) for i, ok in enumerate(obs["vote_targets"]) if ok]
        choices = seats + (["N/A"] if vote_mode == "think-then-vote" else [])  # constrained: never N/A
        assert request["structured_outputs"].regex == think + "<vote>(?:" + "|".join(choices) + ")</vote>"
        assert action.text == f"<vote>{seats[0]}</vote>"  # each voter's own legal seats


def test_boxed_answers_continue_a_body_that_ran_out(fake_vllm, tiny_model_dir):
    sampling = agents.SamplingParams(max_new_tokens=40, seed=1)
    policy = VLLMPolicy(
        str(tiny_model_dir), sampling=sampling, decoding=DecodingOptions(answer="boxed", answer_tokens=4)
    )
    performing, _ = _observations()
    hf = HFPolicy.from_pretrained(
        str(tiny_model_dir), sampling=sampling, decoding=DecodingOptions(answer="boxed", answer_tokens=4)
    )
    reserve = 40 - hf.program(performing[0]).budget  # the hf backend's token budget
    actions = policy.act(performing)
    (prompts, body), (continued, ending) = fake_vllm[0].calls
    assert all(p["max_tokens"] == 40 - reserve and p["structured_outputs"].regex == boxed_body_regex() for p in body)
    assert all(p["max_tokens"] == reserve for p in ending)
    assert ending[0]["structured_outputs"].regex == boxed_answer_regex(CHARS_PER_TOKEN * 4)
    for prompt, more, action in zip(prompts, continued, actions, strict=True):
        assert (
            more[: len(prompt)] == prompt
            and action.completion_token_ids[: len(more) - len(prompt)] == more[len(prompt) :]
        )
        assert last_boxed(action.text) == "7" and action.finish_reason == "stop"
        assert len(action.logprobs) == len(action.completion_token_ids) <= 40


def test_a_game_with_shaped_replies_has_no_violations(fake_vllm, tiny_model_dir):
    policy = VLLMPolicy(str(tiny_model_dir), decoding=DecodingOptions("constrained", answer="boxed", answer_tokens=4),
                        sampling=agents.SamplingParams(max_new_tokens=40))  # fmt: skip
    buffer = rollout(spy_env.GameConfig(n_players=3), [policy] * 3, 2, seed=0)
    assert not any(row["violations"] for row in buffer)


def test_bad_options_fail_before_the_engine_loads(fake_vllm, tiny_model_dir):
    with pytest.raises(ValueError, match="vote_mode must be one of"):
        VLLMPolicy(str(tiny_model_dir), decoding=DecodingOptions(vote_mode="forced"))
    with pytest.raises(ValueError, match="leaves no room for a boxed answer"):
        VLLMPolicy(
            str(tiny_model_dir),
            decoding=DecodingOptions(answer="boxed"),
            sampling=agents.SamplingParams(max_new_tokens=8),
        ).act(_observations()[0])
    assert len(fake_vllm) == 1  # only the second policy got an engine


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
