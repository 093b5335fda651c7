"""Rule baselines on the games of every detection result in docs/ (issue #32).

A detection result means something only next to what a rule that never reads its own copy scores
on the same games. For each setting below this script plays the rule voters of
``agents/rules.py`` (``shortest``, ``longest``, ``fewest-numbers``, ``first-seat``) beside
``random`` and ``heuristic`` on exactly the games the result was measured on (same documents,
seeds, game config and performers), and reports each voter's detection accuracy (the share of
civilian votes on the spy) with its 95% bootstrap interval over games:

- ``eased-heldout``: the 32 held-out games of ``lab/experiments/vote_gradients.py`` and
  ``lab/experiments/smollm2_selfplay.py`` (the ``smollm2-selfplay`` preset's game: 3 players, ``blank``,
  600-character documents; heuristic performers seeded by the preset's seed; held-out documents;
  seed 12345); checked game by game against the committed per-game results;
- ``default-heldout``: the default-setting games of ``smollm2_selfplay.py`` (5 players,
  ``mask_spans``, the same held-out documents; 8 games, of which attempt 3 played the first 4);
- ``default-heldout-32``: the 32 default-setting games of ``lab/results/default_game.md`` (the
  held-out documents in full, seed 12345), what attempts 1-3 on the default game were scored on;
- ``default-600-heldout``: the same 32 games on documents cut at 600 characters (attempt 3's
  training game, scored on its held-out games);
- ``blank-600-heldout``: the same games with the spy's copy blank (self-play attempt 3's held-out games);
- ``tuning-validation``: the 16 validation games of ``lab/experiments/smollm2_tune.py`` (the first 12
  training documents, seed 777), checked against ``lab/results/tuning/base-validation-games.json``;
- ``detect-v1`` and ``detect-v1-first48``: the leaderboard's detection set (``spyrl leaderboard detect``);
- ``baselines-<degrade>``: 500 five-player games per degradation operator, heuristic performers
  (the games of ``spyrl baselines``);
- ``eased-train``: 400 games of the eased game on the training documents (what training plays);
- ``matched-train``, ``matched-heldout``: the same 400 games and the 32 held-out games with the
  length-matched performer ``heuristic-matched`` (every performance the same length and number
  count): every single-text rule sits at chance there, but ``odd-one-out`` does not (civilians
  write the same text);
- ``disjoint-train``, ``disjoint-heldout``: the same games with ``heuristic-disjoint`` (matched, and
  each seat writes from its own share of its copy, so no two performances share content): every
  rule, ``odd-one-out`` included, should sit at chance there, within its interval.

For each setting the JSON records the spy's-performance-is-the-shortest share, the strongest rule
(the highest detection accuracy among the four rules) and, where the results are committed, the
model's numbers on the same games. ``--base-model SETTINGS`` also scores the base SmolLM2 on eased
settings as the experiments do (greedy constrained votes; on ``eased-heldout`` it reproduces
``vote_gradients.json``'s base). Writes ``rule_baselines.json`` (atomically) and prints a Markdown table.

    python lab/experiments/rule_baselines.py --out /tmp/rules.json          # the rules alone: about 2 min
    python lab/experiments/rule_baselines.py --base-model matched-heldout,eased-heldout \
        --out lab/results/rule_baselines.json                        # the committed file: 22 min, 2-core CPU
    python lab/experiments/rule_baselines.py --only disjoint-train,disjoint-heldout --base-model disjoint-heldout \
        --out lab/results/rule_baselines_disjoint.json               # the disjoint game's table
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness import command_of, experiment_parser, user_error

import agents
from agents.rules import RULES
from spy_env.config import GameConfig
from spy_env.heldout import bootstrap, evaluate_heldout
from spy_env.io import write_text
from spy_env.stage import Stage
from spyrl.evaluation.leaderboard import run_leaderboard
from trainers import SpyRLConfig
from trainers.documents import training_documents
from trainers.policies import StagePolicy

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "lab" / "results"
VOTERS = (*RULES, "random", "heuristic")
HELDOUT_SEED = 12345  # lab/experiments/vote_gradients.py and smollm2_selfplay.py: --seed
TUNING_SEED, TUNING_DOCS, TUNING_GAMES = 777, 12, 16  # lab/experiments/smollm2_tune.py's defaults


@dataclass(frozen=True)
class Setting:
    """Games played by ``performer`` in every seat's perform stage, the voter under test voting."""

    name: str
    used_by: str
    config: GameConfig
    documents: tuple[Any, ...]
    games: int
    seed: int
    performer: str


def preset() -> SpyRLConfig:
    """The experiments' training config (heuristic performers), as ``vote_gradients.py`` builds it."""
    return SpyRLConfig.preset("smollm2-selfplay", performer="heuristic")


def settings(train_games: int, baseline_games: int) -> list[Setting]:
    config = preset()
    eased = config.game
    train, heldout = training_documents(eased, config.run.heldout_fraction, 1)
    default = GameConfig.from_dict(
        {"n_players": 5, "degrade": "mask_spans", "train_spy_vote": eased.rules.train_spy_vote}
    )
    out = [
        Setting("eased-heldout", "lab/RESULTS.md 'Does it learn?' (vote_gradients.json, results.json)",
                eased, heldout, 32, HELDOUT_SEED, config.rollout.performer),
        Setting("default-heldout", "results.json / attempt*/results.json default_setting (5 players, mask_spans)",
                default, heldout, 8, HELDOUT_SEED, config.rollout.performer),
        Setting("default-heldout-32", "lab/results/default_game.md (attempts 1-3 on the default setting)",
                default, training_documents(default, config.run.heldout_fraction, 1)[1], 32, HELDOUT_SEED,
                config.rollout.performer),
        Setting("default-600-heldout", "lab/results/default_game.md (attempt 3's training game, held out)",
                replace(default, max_document_chars=eased.limits.max_document_chars), heldout, 32, HELDOUT_SEED,
                config.rollout.performer),
        Setting("blank-600-heldout", "lab/results/selfplay.md attempt 3 (5 players, blank, 600 characters, held out)",
                replace(default, degrade="blank", max_document_chars=eased.limits.max_document_chars), heldout, 32,
                HELDOUT_SEED, config.rollout.performer),
        Setting("tuning-validation", "lab/results/TUNING.md (smollm2_tune.py validation games)",
                eased, train[:TUNING_DOCS], TUNING_GAMES, TUNING_SEED, config.rollout.performer),
        Setting("eased-train", "the eased game as training plays it", eased, train, train_games, 0, config.rollout.performer),
        Setting("matched-train", "the length-matched eased game, training documents",
                eased, train, train_games, 0, "heuristic-matched"),
        Setting("matched-heldout", "the length-matched eased game on the held-out games",
                eased, heldout, 32, HELDOUT_SEED, "heuristic-matched"),
        Setting("disjoint-train", "the length-matched eased game with disjoint performances, training documents",
                eased, train, train_games, 0, "heuristic-disjoint"),
        Setting("disjoint-heldout", "the length-matched eased game with disjoint performances, held-out games",
                eased, heldout, 32, HELDOUT_SEED, "heuristic-disjoint"),
    ]  # fmt: skip
    full = GameConfig()
    corpus = tuple(_all_documents(full))
    for operator in ("blank", "drop_sentences", "mask_spans", "neighbor", "perturb_numbers"):
        out.append(Setting(f"baselines-{operator}", "lab/RESULTS.md 'Baselines' (5 players, full documents)",
                           replace(full, degrade=operator), corpus, baseline_games, 0, "heuristic"))  # fmt: skip
    return out


def _all_documents(config: GameConfig) -> list[Any]:
    from spy_env.corpus import CorpusFilter, load_corpus

    return load_corpus(
        config.source.corpus, CorpusFilter(truncate=config.limits.max_document_chars), max_documents=None
    )


def play(setting: Setting, voter: str) -> tuple[list[dict[str, Any]], list[float]]:
    """Per-game metrics of ``voter`` on the setting's games, and per game whether the spy's performance
    was strictly the shortest."""
    seat = StagePolicy(agents.load(voter, seed=0), performer=agents.load(setting.performer, seed=0))
    buffer, games = evaluate_heldout(
        [seat] * setting.config.rules.n_players, setting.config, setting.documents, setting.games, seed=setting.seed
    )
    lengths: dict[int, dict[int, int]] = {}
    for row in buffer:
        if row["stage"] == Stage.PERFORM:
            lengths.setdefault(row["game_id"], {})[row["seat"]] = len(row["completion"])
    shortest = []
    for game in games:
        by_seat = lengths[game["game_id"]]
        spy = by_seat[game["spy_seat"]]
        shortest.append(float(all(spy < n for s, n in by_seat.items() if s != game["spy_seat"])))
    return games, shortest


def interval(values: Sequence[float]) -> dict[str, float]:
    return bootstrap(values).to_dict()


def same_games(games: list[dict[str, Any]], reference: Path) -> bool | None:
    """Whether ``games`` are the committed per-game results' games (document, seed, spy seat), or None."""
    if not reference.exists():
        return None
    data = json.loads(reference.read_text(encoding="utf-8"))
    committed = data if isinstance(data, list) else data["base"]["per_game"]
    key = ("document_id", "game_seed", "spy_seat")
    return [tuple(g[k] for k in key) for g in games] == [tuple(g[k] for k in key) for g in committed]


REFERENCES = {
    "eased-heldout": EXPERIMENT / "vote_gradients.json",
    "tuning-validation": EXPERIMENT / "tuning" / "base-validation-games.json",
}


def run_setting(setting: Setting) -> dict[str, Any]:
    chance = 1 / (setting.config.rules.n_players - 1)
    out: dict[str, Any] = {
        "used_by": setting.used_by,
        "game": {
            k: v for k, v in setting.config.to_dict().items() if k in ("n_players", "degrade", "max_document_chars")
        },
        "documents": len(setting.documents),
        "games": setting.games,
        "seed": setting.seed,
        "performer": setting.performer,
        "chance": chance,
        "voters": {},
    }
    for voter in VOTERS:
        games, shortest = play(setting, voter)
        out["voters"][voter] = _voter_entry(games, chance)
        out.setdefault("spy_is_shortest", interval(shortest))
        if setting.name in REFERENCES and "same_games" not in out:
            out["same_games"] = same_games(games, REFERENCES[setting.name])
        if setting.name == "default-heldout":
            out.setdefault("voters_first4", {})[voter] = _voter_entry(games[:4], chance)
    out["strongest_rule"] = strongest(out["voters"])
    return out


def _voter_entry(games: list[dict[str, Any]], chance: float) -> dict[str, Any]:
    accuracy = bootstrap([g["detection_accuracy"] for g in games])
    return {
        "detection_accuracy": accuracy.to_dict(),
        "na_rate": interval([g["na_rate"] for g in games]),
        "at_chance": bool(accuracy.low <= chance <= accuracy.high),
        "per_game": [round(g["detection_accuracy"], 4) for g in games],
    }


def strongest(voters: dict[str, Any]) -> str:
    return max(RULES, key=lambda r: voters[r]["detection_accuracy"]["mean"])


def run_detect_v1() -> dict[str, Any]:
    """Every voter on detect-v1 (100 games) and its first 48 games (what SmolLM2 was scored on)."""
    out: dict[str, Any] = {"used_by": "lab/RESULTS.md 'Leaderboard' (spyrl leaderboard detect)", "chance": 0.25}
    full, first48 = {}, {}
    for voter in VOTERS:
        items = run_leaderboard("detect", agents.load(voter, seed=0), model=voter)["results"]["detect-v1"]["items"]
        full[voter] = _voter_entry(items, 0.25)
        first48[voter] = _voter_entry(items[:48], 0.25)
    return {
        "detect-v1": {**out, "games": 100, "voters": full, "strongest_rule": strongest(full)},
        "detect-v1-first48": {**out, "games": 48, "voters": first48, "strongest_rule": strongest(first48)},
    }


def models() -> dict[str, Any]:
    """The committed model numbers on these games (nothing is re-run): the rows of vote_gradients.json
    and attempt 3's results.json on ``eased-heldout``, their default-setting games."""
    out: dict[str, Any] = {}
    gradients = json.loads((EXPERIMENT / "vote_gradients.json").read_text(encoding="utf-8"))
    base = gradients["base"]["per_game"]
    eased = {"base": {m: interval([g[m] for g in base]) for m in ("detection_accuracy", "expected_accuracy")}}
    for row in gradients["rows"]:
        final = row["evaluations"][-1]
        eased[row["row"]] = {m: final[m] for m in ("detection_accuracy", "expected_accuracy")}
    out["eased-heldout"] = {"source": "lab/results/vote_gradients.json", "models": eased}
    attempt3 = json.loads((EXPERIMENT / "results.json").read_text(encoding="utf-8"))["rows"][0]
    out["default-heldout"] = {
        "source": "lab/results/results.json (attempt 3, first 4 games)",
        "models": {k: {"detection_accuracy": v["detection_accuracy"]} for k, v in attempt3["default_setting"].items()
                   if k in ("base", "trained")},
    }  # fmt: skip
    return out


def base_model(settings_by_name: dict[str, Setting], names: list[str]) -> dict[str, Any]:
    """The base SmolLM2's greedy votes on ``names`` (eased 3-player settings), evaluated as the experiments do
    (``vote_gradients.evaluate``: the trainer's learner policy, constrained votes in one forward pass)."""
    from trainers import SpyRLTrainer
    from trainers.policies import learner_policy, seat_policy

    out = {}
    with tempfile.TemporaryDirectory() as runs:
        config = preset()
        trainer = SpyRLTrainer(
            replace(config, run=replace(config.run, output_dir=runs, progress=False, keep_buffers=False))
        )
        trainer.model.eval()
        policy = learner_policy(
            trainer.config.decoding, trainer.config.rollout, trainer.unwrapped, trainer.tokenizer, greedy=True
        )
        for name in names:
            setting = settings_by_name[name]
            seat = seat_policy(
                replace(trainer.config.rollout, performer=setting.performer), trainer.config.run.seed, policy
            )
            _, games = evaluate_heldout(
                [seat] * setting.config.rules.n_players,
                setting.config,
                setting.documents,
                setting.games,
                seed=setting.seed,
            )
            out[name] = {m: interval([g[m] for g in games]) for m in ("detection_accuracy", "expected_accuracy")}
    return out


def table(results: dict[str, Any]) -> str:
    lines = [
        "| setting | games | chance | " + " | ".join(VOTERS) + " | strongest rule | spy's performance shortest |",
        "|---|---|---|" + "---|" * len(VOTERS) + "---|---|",
    ]
    for name, s in results["settings"].items():
        cells = []
        for voter in VOTERS:
            a = s["voters"][voter]["detection_accuracy"]
            cells.append(f"{a['mean']:.3f} [{a['low']:.3f}, {a['high']:.3f}]")
        shortest = s.get("spy_is_shortest", {}).get("mean", math.nan)
        lines.append(
            f"| {name} | {s['games']} | {s['chance']:.2f} | " + " | ".join(cells) + f" | {s['strongest_rule']} | "
            + ("" if math.isnan(shortest) else f"{shortest:.2f}") + " |"
        )  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser(
        __doc__, "runs/rule_baselines.json", "the JSON file to write", overrides=False, overwrite=False
    )
    p.add_argument("--train-games", type=int, default=400, help="games of eased-train / matched-train")
    p.add_argument("--baseline-games", type=int, default=500, help="games per degradation of baselines-*")
    p.add_argument("--only", default="", help="comma-separated setting names (default: all)")
    p.add_argument(
        "--base-model",
        default="",
        help="also score the base SmolLM2 on these eased settings (comma-separated; CPU minutes)",
    )
    args = p.parse_args(argv)
    if min(args.train_games, args.baseline_games) < 1:
        return user_error("--train-games and --baseline-games must be >= 1")
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    by_name = {s.name: s for s in settings(args.train_games, args.baseline_games)}
    model_on = [s.strip() for s in args.base_model.split(",") if s.strip()]
    eased = sorted(name for name, setting in by_name.items() if setting.config.rules.n_players == 3)
    if any(name not in eased for name in model_on):
        return user_error(f"--base-model takes eased settings among {eased}, got {args.base_model!r}")
    start = time.perf_counter()
    chosen: list[Callable[[], dict[str, Any]]] = []
    for setting in by_name.values():
        if not only or setting.name in only:
            chosen.append(lambda s=setting: {s.name: run_setting(s)})
    if not only or only & {"detect-v1", "detect-v1-first48"}:
        chosen.append(run_detect_v1)
    command = command_of(__file__, argv)
    results: dict[str, Any] = {"command": command, "voters": list(VOTERS), "rules": list(RULES), "settings": {}}
    for job in chosen:
        results["settings"].update(job())
    results["models"] = models()
    if model_on:
        results["base_model_measured"] = base_model(by_name, model_on)
    results["minutes"] = (time.perf_counter() - start) / 60
    write_text(Path(args.out), json.dumps(results, indent=1) + "\n")
    print(table(results))
    print(f"wrote {args.out} in {results['minutes']:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
