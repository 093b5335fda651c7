"""``spyrl leaderboard``: a model on a fixed held-out leaderboard set (``spyrl.evaluation.leaderboard.KINDS``),
saved results compared, or the sets rebuilt."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from agents.registry import spec_forms
from spy_env.display import markup_safe
from spyrl.commands.common import add_allow_forfeits, add_ledger, add_overwrite, add_sampling_args, decoding_options
from spyrl.commands.output import console, echo, report_forfeits, result_rows
from spyrl.commands.paths import check_output, read_results
from spyrl.commands.policies import load_agent
from spyrl.evaluation.leaderboard import DOCUMENTS, KINDS


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "leaderboard",
        help="the fixed held-out leaderboard sets: detect (vote as a civilian) or spy (survive as the spy)",
    )
    p.add_argument("set", choices=(*KINDS, "build"), help="the set to run, or 'build' to rebuild both files")
    p.add_argument("--model", default=None, help=f"agent spec: {spec_forms()}")
    p.add_argument("--limit", type=int, default=None, help="only the first N games of the set")
    p.add_argument("--out", default=None, help="results JSON (default runs/leaderboard/SET-MODEL.json)")
    p.add_argument("--out-dir", default=None, help="build: write the sets here instead of the package data")
    p.add_argument("--compare", nargs="+", default=None, metavar="RESULTS", help="tabulate saved results instead")
    p.add_argument("--seed", type=int, default=0, help="seed of the model's sampling")
    p.add_argument(
        "--documents",
        choices=DOCUMENTS,
        default="heldout",
        help="heldout: the released set; confirm: the same games built over the sealed confirm split, scored only "
        "with --preregistration (the set confirm-detect or confirm-spy)",
    )
    p.add_argument(
        "--preregistration",
        default=None,
        metavar="FILE",
        help="a JSON plan (recipe, seeds, primary_metric, test, alpha) committed to git before the run; checked, "
        "and its path and commit recorded in the results and the ledger",
    )
    add_ledger(p, "this scoring")
    add_overwrite(p)
    add_allow_forfeits(p)
    add_sampling_args(p)
    return p


def run(args: argparse.Namespace) -> int:
    from spy_env.confirm import check_preregistration
    from spy_env.ledger import Look
    from spyrl.evaluation.leaderboard import leaderboard_table, run_leaderboard, set_path, write_set

    if args.set == "build":
        if args.documents == "confirm":
            raise ValueError("build writes the released sets; the confirm games are built when they are scored")
        for kind in KINDS:
            console.print(
                f"wrote {write_set(kind, Path(args.out_dir) / set_path(kind).name if args.out_dir else None)}"
            )
        return 0
    if args.compare:
        echo(leaderboard_table([read_results(path) for path in args.compare]))
        return 0
    if not args.model:
        raise ValueError(f"spyrl leaderboard {args.set} needs --model SPEC")
    # before anything is loaded, played or written: the plan, then where the look is recorded
    confirm = args.preregistration if args.documents == "confirm" else None
    if args.documents == "confirm":
        if not args.preregistration:
            raise ValueError("--documents confirm needs --preregistration FILE, a plan committed to git before the run")
        check_preregistration(args.preregistration)
    elif args.preregistration:
        raise ValueError("--preregistration is the plan of a confirm run: pass it with --documents confirm")
    look = Look(model=args.model, ledger=args.ledger, command=args.argv)
    look.check(args.model)
    name = f"confirm-{args.set}" if args.documents == "confirm" else args.set
    out = args.out or f"runs/leaderboard/{name}-{args.model.replace('/', '_').replace(':', '_')}.json"
    check_output(out, overwrite=args.overwrite, suffixes=(".json",))
    policy = load_agent(args.model, args)
    decoding = {
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens,
        **dataclasses.asdict(decoding_options(args)),
        "seed": args.seed,
    }
    with console.status(f"spyrl leaderboard {name}: {markup_safe(args.model)}"):
        results = run_leaderboard(args.set, policy, model=args.model, limit=args.limit, confirm=confirm, look=look)
    results.update(decoding=decoding, seed=args.seed)  # the CLI's settings
    from spyrl.evaluation import save_results

    path = save_results(results, out)
    echo(leaderboard_table([results]))
    console.print(f"results written to {markup_safe(path)}")
    return report_forfeits(result_rows(results), args)
