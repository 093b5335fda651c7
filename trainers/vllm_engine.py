"""Rollouts through a vLLM server with weight sync, using TRL's ``VLLMClient`` (GPU only).

Start the server with ``trl vllm-serve --model MODEL`` (in TRL 1.16 that launches ``vllm serve`` in
dev mode with the NCCL weight-transfer engine), then train with
``SpyRLConfig(generation="vllm-server", vllm_server_url=...)``. After every update the trainer
pushes the new weights (``update_model_params``) and clears the prefix cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.sampling import SamplingParams
from spy_env.policy import Action, Observation, chat_messages

__all__ = ["VLLMServerPolicy"]


class VLLMServerPolicy:
    """A policy whose completions come from a vLLM server kept in sync with the trained model."""

    def __init__(self, base_url: str, tokenizer: Any, sampling: SamplingParams, name: str = "policy") -> None:
        try:
            from trl.generation.vllm_client import VLLMClient
        except ImportError as e:
            raise ImportError(
                "generation='vllm-server' needs trl and vllm on a CUDA machine: pip install 'spyrl[train,vllm]'"
            ) from e
        self.client = VLLMClient(base_url=base_url, connection_timeout=240.0)
        self.client.init_communicator(device=0)
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.name = name

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        prompts = [
            list(self.tokenizer.apply_chat_template(chat_messages(o), add_generation_prompt=True, tokenize=True))
            for o in observations
        ]
        s = self.sampling
        out = self.client.generate(
            prompts=prompts,
            n=1,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            max_tokens=s.max_new_tokens,
            logprobs=0,
        )
        actions = []
        for prompt, completion, logprobs in zip(prompts, out["completion_ids"], out["logprobs"], strict=True):
            eos = self.tokenizer.eos_token_id
            actions.append(
                Action(
                    text=self.tokenizer.decode(completion, skip_special_tokens=True),
                    prompt_token_ids=prompt,
                    completion_token_ids=list(completion),
                    logprobs=[float(step[0]) for step in logprobs],
                    finish_reason="stop" if completion and completion[-1] == eos else "length",
                )
            )
        return actions

    def sync(self, model: Any) -> None:
        """Push the trained weights to the server and drop its stale prefix cache."""
        self.client.update_model_params(model)
        self.client.reset_prefix_cache()
