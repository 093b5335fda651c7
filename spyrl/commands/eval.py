"""``spyrl eval``: a model on the math benchmarks (scored with math-verify), in games against the
baselines (``--game``), or its votes against a judge's ranking (``--alignment``); ``--compare`` tabulates
saved results."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents.registry import BACKENDS, spec_forms
from spy_env.display import markup_safe, terminal_safe
from spy_env.extras import Extra, require
from spyrl.commands.common import add_game_args, add_ledger, add_max_forfeit_rate, add_overwrite, game_config
from spyrl.commands.output import console, echo, report_forfeits, result_rows
from spyrl.commands.paths import (
    TOURNAMENT_FILES,
    check_input,
    check_output,
    check_output_dir,
    read_results,
    require_matplotlib,
)
from spyrl.commands.policies import load_agent
from spyrl.evaluation.benchmarks import BENCHMARKS


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("eval", help="math benchmarks (math-verify) or game metrics of a model")
    add_game_args(p, default_agent="heuristic")
    llms = spec_forms(b for b in BACKENDS.values() if b.llm)
    p.add_argument("--model", default=None, help=f"agent spec: {llms}, ...")
    p.add_argument(
        "--benchmarks",
        default="gsm8k",
        help="comma-separated: "
        + ",".join(BENCHMARKS)
        + "; the first seven give the card's seven-benchmark average (aime24 and mmlu_pro are a guess: the card "
        "names five)",
    )
    p.add_argument("--limit", type=int, default=None, help="first N questions of each benchmark")
    p.add_argument("--k", type=int, default=None, help="samples per question (avg@k); default per benchmark")
    p.add_argument(
        "--data", action="append", default=[], metavar="NAME=PATH", help="load a benchmark from a local folder/file"
    )
    p.add_argument("--out", default="runs/eval/results.json")
    p.add_argument("--chart", default=None, help="also draw a bar chart (PNG)")
    p.add_argument("--compare", nargs="+", default=None, metavar="RESULTS", help="tabulate/plot saved results instead")
    p.add_argument("--game", action="store_true", help="game evaluation against the baselines instead")
    p.add_argument("--alignment", action="store_true", help="votes received vs a judge's quality ranking")
    p.add_argument("--judge", default=None, help="agent spec of the judge for --alignment")
    p.add_argument("--games", type=int, default=60)
    p.add_argument("--out-dir", default="runs/eval-game", help="output folder of --game")
    add_ledger(p, "each benchmark scored (not --game or --alignment)")
    add_overwrite(p)
    add_max_forfeit_rate(p)
    # benchmarks keep their protocol: the model's own answers, with each set's budget (docs/EVALUATION.md) unless
    # --max-new-tokens is given; --game and --alignment: 128
    p.set_defaults(max_new_tokens=None, answer="free")
    return p


def run(args: argparse.Namespace) -> int:
    if args.chart:
        check_output(args.chart, overwrite=args.overwrite, suffixes=(".png",), flag="--chart")
        require_matplotlib("--chart", "spyrl[eval]")
    if args.alignment:
        require_matplotlib("the alignment plot", "spyrl[eval]")
    elif args.game:
        require_matplotlib("the game evaluation's chart.png")
    elif not args.compare:  # benchmarks are scored after every completion is generated
        require([Extra("math_verify", "spyrl[eval]", "scoring math benchmarks")])
    if args.compare:
        return _eval_compare(args)
    if not args.model:
        raise ValueError("spyrl eval needs --model SPEC (or --compare FILES)")
    if args.alignment or args.game:
        names = ["alignment.png"] if args.alignment else TOURNAMENT_FILES
        check_output_dir(args.out_dir, names, overwrite=args.overwrite, flag="--out-dir")
    else:
        from spy_env.ledger import Look

        Look(ledger=args.ledger).check(args.model)  # a ledger the benchmarks' looks cannot be written to, now
        check_output(args.out, overwrite=args.overwrite, suffixes=(".json",))
    if args.max_new_tokens is None:  # games: a game reply; benchmarks: the largest budget of the sets asked for
        from spyrl.evaluation import token_budget

        benchmarks = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
        args.max_new_tokens = 128 if args.alignment or args.game else token_budget(benchmarks)
    paths = _benchmark_paths(args.data)
    policy = load_agent(args.model, args)
    if args.alignment:
        return _eval_alignment(args, policy)
    if args.game:
        return _eval_game(args, policy)
    return _eval_benchmarks(args, policy, paths)


def _eval_compare(args: argparse.Namespace) -> int:
    """``eval --compare``: tabulate (and chart) saved results."""
    from spyrl.evaluation import plot_results, results_table

    runs = [read_results(path) for path in args.compare]
    echo(results_table(runs))
    if args.chart:
        console.print(f"chart written to {markup_safe(plot_results(runs, args.chart))}")
    return 0


def _benchmark_paths(items: Sequence[str]) -> dict[str, str]:
    """``--data NAME=PATH`` items as ``{name: path}`` (each path must exist)."""
    paths = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            raise ValueError(f"--data expects NAME=PATH, got {item!r}")
        paths[name] = str(check_input(path, f"--data {name}:"))
    return paths


def _eval_alignment(args: argparse.Namespace, policy: Any) -> int:
    """``eval --alignment``: votes received against a judge's ranking of the performances."""
    from spy_env.runner import Runner
    from spyrl.evaluation.alignment import reward_alignment

    if not args.judge:
        raise ValueError("--alignment needs --judge SPEC (the agent that ranks performances)")
    judge = load_agent(args.judge, args)
    runner = Runner(game_config(args))
    buffer = runner.run([policy] * runner.config.rules.n_players, args.games, seed=args.seed, progress=True)
    documents = {doc.id: doc.text for doc in runner.documents}
    result = reward_alignment(buffer, documents, judge)
    echo(result.summary())
    console.print(f"plot written to {markup_safe(result.plot(Path(args.out_dir) / 'alignment.png'))}")
    return 0


def _eval_game(args: argparse.Namespace, policy: Any) -> int:
    """``eval --game``: the model against the baselines at mixed tables."""
    from spyrl.evaluation import game_evaluation

    result = game_evaluation(
        policy,
        args.model,
        args.games,
        seed=args.seed,
        config=game_config(args),
        max_forfeit_rate=args.max_forfeit_rate,
    )
    result.save(args.out_dir)
    echo(result.table())
    return report_forfeits(result.buffer.rows, args)


def _eval_benchmarks(args: argparse.Namespace, policy: Any, paths: dict[str, str]) -> int:
    """``eval``: math benchmarks, scored with math-verify."""
    from spy_env.ledger import Look
    from spyrl.evaluation import evaluate, plot_results, results_table, save_results
    from spyrl.evaluation.run import record_looks

    names = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    decoding = {
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
    }
    results = evaluate(
        policy,
        names,
        k=args.k,
        limit=args.limit,
        seed=args.seed,
        paths=paths,
        batch_size=args.batch_size,
        progress=_print_progress,
    )
    results.update(model=args.model, decoding=decoding)  # the spec as typed, the CLI's settings
    record_looks(results, Look(ledger=args.ledger, command=args.argv))
    path = save_results(results, args.out)
    echo(results_table([results]))
    console.print(f"results written to {markup_safe(path)}")
    if args.chart:
        console.print(f"chart written to {markup_safe(plot_results([results], args.chart))}")
    return report_forfeits(result_rows(results), args)


def _print_progress(benchmark: str, done: int, total: int) -> None:
    print(terminal_safe(f"{benchmark}: {done}/{total} completions"), flush=True)
