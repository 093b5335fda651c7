"""``vllm`` backend: the offline ``vllm.LLM`` engine (GPU), with per-token logprobs.

Prompts go in as token ids built with the model's chat template, so the recorded
``prompt_token_ids`` are exactly what the engine saw. ``logprobs=0`` asks vLLM for the
log-probability of each sampled token only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.sampling import SamplingParams
from spy_env.policy import Action, Observation, chat_messages

__all__ = ["VLLMPolicy"]


def _vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError(
            "the vllm backend needs vLLM and a CUDA GPU: pip install 'spyrl[vllm]' (see the vLLM install guide)"
        ) from e
    return vllm


class VLLMPolicy:
    """A ``vllm.LLM`` engine as a batched policy (engine kwargs go to ``vllm.LLM``)."""

    def __init__(
        self,
        model: str,
        *,
        sampling: SamplingParams | None = None,
        name: str | None = None,
        **engine_kwargs: Any,
    ):
        vllm = _vllm()
        self.sampling = sampling or SamplingParams()
        self.name = name or f"vllm:{model}"
        self.llm = vllm.LLM(model=model, **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self._calls = 0

    def _params(self, n_prompts: int):
        vllm = _vllm()
        s = self.sampling
        seed = None if s.seed is None else s.seed + self._calls
        self._calls += 1
        return vllm.SamplingParams(
            n=1,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k if s.top_k else -1,
            max_tokens=s.max_new_tokens,
            seed=seed,
            logprobs=0,
        )

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        from vllm.inputs import TokensPrompt

        prompts = [
            list(self.tokenizer.apply_chat_template(chat_messages(obs), add_generation_prompt=True, tokenize=True))
            for obs in observations
        ]
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts],
            self._params(len(prompts)),
            use_tqdm=False,
        )
        actions = []
        for prompt, output in zip(prompts, outputs, strict=True):
            completion = output.outputs[0]
            token_ids = list(completion.token_ids)
            logprobs = None
            if completion.logprobs is not None:
                logprobs = [float(step[tok].logprob) for step, tok in zip(completion.logprobs, token_ids, strict=True)]
            actions.append(
                Action(
                    text=completion.text,
                    prompt_token_ids=prompt,
                    completion_token_ids=token_ids,
                    logprobs=logprobs,
                    finish_reason=completion.finish_reason or "",
                )
            )
        return actions

    # ----------------------------------------------- rollout policy (spy_env.policy.RolloutPolicy)
    def restart_sampling(self, seed: int | None) -> None:
        """Sample as a fresh run seeded by ``seed``: request k of the run is seeded with ``seed + k``."""
        self.sampling = SamplingParams(**{**self.sampling.to_dict(), "seed": seed})
        self._calls = 0

    def sync(self) -> None:
        """An offline engine loads its weights from ``model`` once and cannot follow a trainer's."""
        raise NotImplementedError(
            "the offline vllm backend cannot follow a trainer's weights; train with generation='vllm-colocate' "
            "or 'vllm-server' (trainers.vllm_engine)"
        )
