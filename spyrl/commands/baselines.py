"""``spyrl baselines``: detection accuracy of scripted agents per degradation operator, as a Markdown table."""

from __future__ import annotations

import argparse

from agents.registry import spec_forms
from spy_env.config import GameConfig
from spy_env.degrade import DEGRADERS
from spyrl.commands.common import add_seed
from spyrl.commands.output import echo


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("baselines", help="detection accuracy of scripted agents per degradation operator")
    p.add_argument("--games", type=int, default=500)
    p.add_argument("--players", type=int, default=5)
    p.add_argument(
        "--degrade", default="all", help=f"'all' or a comma-separated list of {', '.join(sorted(DEGRADERS))}"
    )
    p.add_argument("--agents", default="heuristic,random", help=f"comma-separated agent specs: {spec_forms()}")
    add_seed(p)
    return p


def run(args: argparse.Namespace) -> int:
    import agents
    from agents.rules import RULES, played_shares
    from spy_env.metrics import game_metrics
    from spy_env.runner import Runner

    operators = sorted(DEGRADERS) if args.degrade == "all" else args.degrade.split(",")
    specs = args.agents.split(",")
    results = []
    for operator in operators:
        config = GameConfig(n_players=args.players, degrade=operator)
        runner = Runner(config)
        for spec in specs:
            policy = agents.load(spec, seed=args.seed)
            buffer = runner.run([policy] * config.rules.n_players, args.games, seed=args.seed)
            m = game_metrics(buffer)
            rules = {name: played_shares(buffer, rule) for name, rule in RULES.items()}
            rules = {name: sum(shares) / len(shares) for name, shares in rules.items() if shares}
            results.append((operator, spec, m, max(rules.items(), key=lambda kv: kv[1]) if rules else None))
    lines = [
        "| degrade | agent | detection accuracy | spy caught | N/A rate | games | strongest rule, same games |",
        "|---|---|---|---|---|---|---|",
    ]
    for operator, spec, m, strongest in results:
        rule = f"`{strongest[0]}` {strongest[1]:.3f}" if strongest else "–"
        lines.append(
            f"| {operator} | {spec} | {m['detection_accuracy']:.3f} | {m['spy_caught_rate']:.3f} "
            f"| {m['na_rate']:.3f} | {int(m['games'])} | {rule} |"
        )
    echo("\n".join(lines))
    return 0
