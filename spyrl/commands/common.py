"""Options several commands share: the game, the agents, LLM sampling, outputs and the ledger; and the
records they become (a :class:`~spy_env.config.GameConfig`, :class:`~agents.decoding.DecodingOptions`).

Choices and help texts that name registered things read the registries (``spy_env.degrade.DEGRADERS``,
``spy_env.tasks.TASKS``, ``agents.registry.BACKENDS``), so the help lists what the process can play.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any

from agents.decoding import ANSWER_MODES, VOTE_MODES, DecodingOptions
from agents.registry import BACKENDS, spec_forms
from spy_env.config import GameConfig
from spy_env.corpus import DOCUMENT_SPLITS, game_documents, split_documents
from spy_env.degrade import DEGRADERS, needs_neighbors
from spy_env.tasks import TASKS

__all__ = [
    "add_allow_forfeits",
    "add_game_args",
    "add_ledger",
    "add_max_forfeit_rate",
    "add_overwrite",
    "add_sampling_args",
    "add_seed",
    "decoding_options",
    "game_config",
    "listed",
]


def add_game_args(p: argparse.ArgumentParser, default_agent: str = "heuristic") -> None:
    """The ``game`` and ``agents`` groups, and :func:`add_sampling_args`."""
    g = p.add_argument_group("game")
    g.add_argument("--players", type=int, default=5, help="players per game (3..10)")
    g.add_argument("--rounds", type=int, default=1, help="maximum rounds (plurality elimination)")
    g.add_argument("--degrade", choices=sorted(DEGRADERS), default=None, help="degradation operator g")
    g.add_argument("--mask-ratio", type=float, default=None, help="share of the text g changes")
    g.add_argument("--task", choices=sorted(TASKS), default="math")
    g.add_argument(
        "--corpus",
        default="embedded",
        help="'embedded', 'nemotron[:CONFIG]', 'hf:ID[:CONFIG]' or a path",
    )
    g.add_argument("--max-documents", type=int, default=None)
    g.add_argument(
        "--documents",
        choices=DOCUMENT_SPLITS,
        default="all",
        help="which of the corpus's documents to play: all, the training split, or the held-out split no preset "
        "trains on (a hash of each document's id, as the trainer and the leaderboard sets split them)",
    )
    add_seed(g)
    a = p.add_argument_group("agents")
    a.add_argument(
        "--agent",
        default=default_agent,
        help=f"agent spec for every seat: {spec_forms()}"
        + (" (auto: smollm2 when installed, else heuristic)" if default_agent == "auto" else ""),
    )
    a.add_argument(
        "--seat",
        action="append",
        default=[],
        metavar="K=SPEC",
        help="agent of seat K (1-based), e.g. --seat 1=random; repeatable",
    )
    add_allow_forfeits(a)
    add_sampling_args(p)


def add_allow_forfeits(p: Any) -> None:
    p.add_argument(
        "--allow-forfeits",
        action="store_true",
        help="exit 0 even when an agent forfeited every action (otherwise 3: its backend is down)",
    )


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    """The ``LLM sampling`` group: what :func:`spyrl.commands.policies.load_agent` gives an LLM backend."""
    s = p.add_argument_group("LLM sampling")
    s.add_argument("--temperature", type=float, default=0.7)
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--max-new-tokens", type=int, default=96)
    s.add_argument("--batch-size", type=int, default=16, help="generation batch size of local models")
    s.add_argument(
        "--dtype",
        choices=("fast", "auto", "float32", "bfloat16", "int8"),
        default="fast",
        help="weights of local models: fast (bfloat16 on GPUs and on CPUs with native bf16, AVX-512 BF16 or AMX; "
        "else float32), auto (bfloat16 on GPUs, float32 on CPUs), int8 (the hf backend on a CPU: linear weights "
        "quantized to int8, for playing and evaluating), or a dtype",
    )
    s.add_argument(
        "--share-prefix",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="local models: encode the prompts' shared prefixes once (a game's civilians share their copy and "
        "the performances); --no-share-prefix prefills every prompt in full",
    )
    s.add_argument(
        "--vote-mode",
        choices=VOTE_MODES,
        default="think-then-vote",
        help=f"local models ({', '.join(b.name for b in BACKENDS.values() if b.decoding)}): free; constrained "
        "(<vote>k</vote>, the model picks k); think-then-vote (free reasoning up to --think-tokens, then a forced "
        "vote among the legal seats)",
    )
    s.add_argument("--think-tokens", type=int, default=32, help="reasoning budget of think-then-vote")
    s.add_argument("--abstain", action="store_true", help="forced votes may also pick N/A")
    s.add_argument(
        "--answer",
        choices=ANSWER_MODES,
        default="boxed",
        help="local models: free, or boxed (a \\boxed{} answer is forced when the budget runs out)",
    )


def add_overwrite(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overwrite", action="store_true", help="replace existing output files")


def add_max_forfeit_rate(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-forfeit-rate",
        type=float,
        default=0.1,
        help="agents that forfeit a larger share of their actions are flagged and not ranked",
    )


def add_ledger(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--ledger",
        default=None,
        metavar="PATH",
        help=f"the evaluation ledger that records {what} ('off': none); default $SPYRL_LEDGER, else ledger.jsonl "
        "in the spyrl cache folder",
    )


def add_seed(p: Any) -> None:
    p.add_argument("--seed", type=_seed, default=0)


def _seed(text: str) -> int:
    """``--seed``: an integer >= 0 (argparse names this function in its message for a word)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed is an integer >= 0, got {value}")
    return value


def game_config(args: argparse.Namespace) -> GameConfig:
    """The game of :func:`add_game_args`'s options, its corpus cut to ``--documents``' split."""
    config = GameConfig(
        n_players=args.players,
        rounds=args.rounds,
        degrade=args.degrade,
        mask_ratio=args.mask_ratio,
        task=args.task,
        corpus=args.corpus,
        max_documents=args.max_documents,
    )
    if args.documents == "all":
        return config
    train, heldout = split_documents(list(game_documents(config)))
    chosen = heldout if args.documents == "heldout" else train
    if len(chosen) < (2 if needs_neighbors(config.rules.resolved_degrade) else 1):
        raise ValueError(f"--documents {args.documents} leaves {len(chosen)} document(s) of --corpus {args.corpus}")
    return dataclasses.replace(config, corpus=tuple(chosen), max_documents=None)


def decoding_options(args: argparse.Namespace) -> DecodingOptions:
    """The command's ``--vote-mode``, ``--think-tokens``, ``--abstain`` and ``--answer`` as one record."""
    return DecodingOptions(
        vote_mode=args.vote_mode, think_tokens=args.think_tokens, abstain=args.abstain, answer=args.answer
    )


def listed(names: Sequence[str]) -> str:
    """Names as a help text lists them.

    >>> listed(["a"]), listed(["a", "b", "c"])
    ('a', 'a, b or c')
    """
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)
