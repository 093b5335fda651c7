"""agents: policies for any seat of spy_env — scripted baselines, local and served LLMs, humans.

``agents.load(spec)`` builds a policy from a spec string such as ``"heuristic"``,
``"hf:Qwen/Qwen3-4B-Instruct-2507"`` or ``"openai:my-model@http://127.0.0.1:8000/v1"``. Each kind
of spec is a backend in the registry (:mod:`agents.registry`): :func:`register_backend` adds
one, and the table below, the ``spyrl`` command line and docs/GUIDE.md's agents table are generated from it.

Heavy backends import their dependencies only when their spec is loaded. A policy is anything
with a ``name`` and ``act(observations) -> list[str | Action]`` (:class:`spy_env.policy.Policy`).

Built-in backends (``agents.backends_table()`` lists every registered one):

"""

from __future__ import annotations

import importlib

from agents.registry import BACKENDS, Backend, backend_of, backends_table, load, register_backend
from agents.sampling import SamplingParams
from agents.scripted import HeuristicAgent, RandomAgent
from spy_env.policy import Action, Policy, chat_messages

# The modules of the built-in backends register them on import, in this order: the order of the
# table and of the forms listed in messages and help texts.
BUILTIN_BACKEND_MODULES = ("scripted", "rules", "hf", "smollm2", "vllm_backend", "openai_compat", "human")
for _module in BUILTIN_BACKEND_MODULES:
    importlib.import_module(f"agents.{_module}")
del _module

__all__ = [
    "BACKENDS",
    "Action",
    "Backend",
    "HeuristicAgent",
    "Policy",
    "RandomAgent",
    "SamplingParams",
    "backend_of",
    "backends_table",
    "chat_messages",
    "load",
    "register_backend",
]

__doc__ = (__doc__ or "") + backends_table() + "\n"
