"""What do a model's votes follow? Length, seat or content, in the eased game and the default game.

Issue #26, item 0: a SmolLM2 trained on the eased game (3 players, ``blank`` spy copy, 600
characters) catches the spy there and not in the default game (5 players, ``mask_spans``, full
documents). This probe asks each model for its constrained vote distribution on fixed games of both
settings, with heuristic performers, and measures per civilian vote (in expectation over the
model's distribution at temperature 1):

- ``spy``: probability on the spy (expected accuracy);
- ``shortest``: probability on the shortest other performance (the length shortcut), beside how
  often the spy's performance *is* the shortest;
- ``first_seat``: probability on the first legal seat (a position preference);
- ``swap``: the same game with the spy's performance text and one other civilian's exchanged
  (the voter's own copy unchanged): probability on the seat that now shows the spy's text
  (``swap_text``) and on the spy's seat, now showing a civilian's text (``swap_seat``). A voter that
  reads content follows the text; one that learned seats or positions does not move.

Games are drawn from the *training* split of the corpus (never the held-out documents, which are
kept for reported results). Each metric is a mean over games with its 95% bootstrap interval.

    python lab/experiments/vote_probe.py --model smollm2 --model runs/fast/eased_model --out lab/results/vote_probe.json
    python lab/experiments/vote_probe.py --out lab/results/vote_probe_rules.json     # the rule baselines alone

Every run also scores the rule baselines of ``agents/rules.py`` on the same votes (``rules``: the share
of each rule's tied picks that is the spy), so each model's ``spy`` has its rules beside it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from harness import command_of, experiment_parser, user_error

SETTINGS = {
    "eased": {"n_players": 3, "degrade": "blank", "max_document_chars": 600},
    "default": {"n_players": 5, "degrade": "mask_spans"},
}
METRICS = ("spy", "shortest", "spy_is_shortest", "first_seat", "swap_text", "swap_seat")


def load_voter(spec: str) -> Any:
    """A greedy constrained-vote SmolLM2 (``smollm2``) or a saved model folder."""
    from agents import SamplingParams, smollm2
    from agents.decoding import DecodingOptions
    from agents.hf import HFPolicy

    options = {
        "sampling": SamplingParams(temperature=0.0, max_new_tokens=8),
        "decoding": DecodingOptions(vote_mode="constrained"),
        "dtype": "fast",
    }
    if spec == "smollm2":
        return smollm2.load(**options)
    return HFPolicy.from_pretrained(spec, name=spec, **options)


def games(setting: str, count: int, seed: int) -> list[tuple[Any, dict[str, str]]]:
    """``count`` fixed (env, performances) pairs on training documents: heuristic performances played."""
    import spy_env
    from agents import HeuristicAgent
    from spy_env.config import GameConfig
    from trainers.documents import training_documents

    config = GameConfig.from_dict(SETTINGS[setting])
    train, _ = training_documents(config, 0.2, 0)  # the trainer's default split: held-out documents never used
    config = replace(config, corpus=train, max_documents=None)
    performer = HeuristicAgent(seed=seed)
    out = []
    for k in range(count):
        env = spy_env.parallel_env(config)
        obs, _ = env.reset(seed=seed + k)
        performances = dict(zip(env.agents, performer.act([obs[a] for a in env.agents]), strict=True))
        out.append((env, performances))
    return out


def vote_observations(env: Any, performances: dict[str, str], seed: int) -> tuple[list[dict], int]:
    """The vote observations after ``performances`` (a fresh reset of the same game), and the spy's seat."""
    obs, _ = env.reset(seed=seed)
    obs, *_ = env.step(performances)
    return [obs[a] for a in env.agents], int(env.state()[2])  # state(): stage, round, spy seat, alive...


def probe_setup(env: Any, performances: dict[str, str], seed: int, rng: np.random.Generator) -> tuple:
    """A game's vote observations, the spy's seat, the civilian whose text trades places with the spy's, the
    performances after that swap, and the civilians who vote (their own performance the same in both games)."""
    observations, spy = vote_observations(env, performances, seed)
    civilians = [s for s in range(len(observations)) if s != spy]
    other = int(rng.choice(civilians))
    swapped = dict(performances)
    swapped[f"player_{spy}"], swapped[f"player_{other}"] = (
        performances[f"player_{other}"],
        performances[f"player_{spy}"],
    )
    return observations, spy, other, swapped, [s for s in civilians if s != other]


def rule_game(env: Any, performances: dict[str, str], seed: int, rng: np.random.Generator) -> dict[str, float]:
    """Each rule of ``agents/rules.py`` on the probe's own votes of one game: the share of its tied picks that
    is the spy, averaged over the voters (the rule baselines beside the models' ``spy``)."""
    from agents.rules import RULES, spy_share

    observations, spy, _, _, voters = probe_setup(env, performances, seed, rng)
    out = {}
    for name, rule in RULES.items():
        hits = []
        for seat in voters:
            shown = observations[seat]["performances"]
            hits.append(spy_share(rule, shown, [s for s in range(len(shown)) if s != seat], spy))
        out[name] = float(np.mean(hits))
    return out


def probe_game(voter: Any, env: Any, performances: dict[str, str], seed: int, rng: np.random.Generator) -> dict:
    observations, spy, other, swapped, voters = probe_setup(env, performances, seed, rng)
    n = len(observations)
    lengths = [len(performances[f"player_{s}"]) for s in range(n)]
    swapped_obs, _ = vote_observations(env, swapped, seed)
    plain = voter.act([observations[s] for s in voters])
    after = voter.act([swapped_obs[s] for s in voters])
    row: dict[str, list[float]] = {m: [] for m in METRICS}
    for seat, action, moved in zip(voters, plain, after, strict=True):
        p = {int(k) - 1: v for k, v in (action.vote_distribution or {}).items() if k.isdigit()}
        q = {int(k) - 1: v for k, v in (moved.vote_distribution or {}).items() if k.isdigit()}
        others = [s for s in range(n) if s != seat]
        shortest = min(others, key=lambda s: lengths[s])
        row["spy"].append(p.get(spy, 0.0))
        row["shortest"].append(p.get(shortest, 0.0))
        row["spy_is_shortest"].append(float(shortest == spy))
        row["first_seat"].append(p.get(others[0], 0.0))
        row["swap_text"].append(q.get(other, 0.0))
        row["swap_seat"].append(q.get(spy, 0.0))
    return {m: float(np.mean(v)) for m, v in row.items()}


def summarize(rows: list[dict]) -> dict[str, dict[str, float]]:
    from spy_env.heldout import bootstrap

    return {m: bootstrap([r[m] for r in rows]).to_dict() for m in METRICS}


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser(__doc__, None, "JSON file to write", overrides=False, overwrite=False)
    p.add_argument(
        "--model", action="append", default=[],
        help="smollm2 or a saved model folder (repeatable; none: the rule baselines alone)",
    )  # fmt: skip
    p.add_argument("--games", type=int, default=48, help="games per setting")
    p.add_argument("--seed", type=int, default=777)
    args = p.parse_args(argv)
    from spy_env.heldout import bootstrap
    from spy_env.io import refuse_existing_outputs, write_text

    try:
        for spec in args.model:
            if spec != "smollm2" and not (Path(spec) / "config.json").is_file():
                raise ValueError(f"--model {spec!r}: not smollm2 and not a model folder (no config.json)")
        refuse_existing_outputs([args.out], overwrite=False)
    except ValueError as e:
        return user_error(e)
    command = command_of(__file__, argv)
    results: dict[str, Any] = {"command": command, "games": args.games, "models": {}, "rules": {}}
    fixed = {setting: games(setting, args.games, args.seed) for setting in SETTINGS}
    for setting, played in fixed.items():
        rng = np.random.default_rng(args.seed)  # the same swaps, so the same voters, as every model's
        rows = [rule_game(env, perf, args.seed + k, rng) for k, (env, perf) in enumerate(played)]
        results["rules"][setting] = {name: bootstrap([r[name] for r in rows]).to_dict() for name in rows[0]}
        line = ", ".join(f"{name} {v['mean']:.3f}" for name, v in results["rules"][setting].items())
        print(f"rules [{setting}] {line}", flush=True)
    for spec in args.model:
        voter = load_voter(spec)
        results["models"][spec] = {}
        for setting, played in fixed.items():
            rng = np.random.default_rng(args.seed)
            rows = [probe_game(voter, env, perf, args.seed + k, rng) for k, (env, perf) in enumerate(played)]
            results["models"][spec][setting] = summarize(rows)
            line = ", ".join(f"{m} {results['models'][spec][setting][m]['mean']:.3f}" for m in METRICS)
            print(f"{spec} [{setting}] {line}", flush=True)
    write_text(Path(args.out), json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
