"""Running benchmarks with any agents backend: batched generation, avg@k, results JSON, tables,
charts, and game-level evaluation against the baselines. ``spyrl eval`` records every benchmark it
scores as a look in the evaluation ledger (:func:`record_looks`, :mod:`spy_env.ledger`)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from spy_env.heldout import bootstrap
from spy_env.io import save_figure, write_text
from spy_env.ledger import Look, fingerprint, headline
from spy_env.policy import Action, policy_name
from spy_env.runner import _call as call_policy
from spy_env.runner import safe_reason
from spyrl.evaluation.benchmarks import (
    BENCHMARKS,
    CARD_BENCHMARKS,
    GUESSED_BENCHMARKS,
    MATH_SUFFIX,
    MC_SUFFIX,
    load_items,
)
from spyrl.evaluation.scoring import Scorer, extract_answer, mc_letter

logger = logging.getLogger(__name__)

__all__ = [
    "Progress",
    "card_average",
    "evaluate",
    "game_evaluation",
    "plot_results",
    "record_looks",
    "results_table",
    "save_results",
]

Progress = Callable[[str, int, int], None]  # (benchmark, completions done, completions in all)


def _observation(prompt: str) -> dict[str, Any]:
    """A benchmark question shaped like a performing-stage observation (no system turn)."""
    return {"system": "", "prompt": prompt, "copy": prompt, "stage": 0, "seat": 0, "performances": ()}


def evaluate(
    policy: Any,
    benchmarks: Sequence[str],
    *,
    k: int | None = None,
    limit: int | None = None,
    seed: int = 0,
    paths: Mapping[str, str] | None = None,
    batch_size: int = 64,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Evaluate ``policy`` (anything with a batched ``act``) on ``benchmarks``; returns results.

    Each question is sampled ``k`` times (the benchmark's default avg@k when ``k`` is None) and
    scored per sample; accuracy is the mean over questions of the mean over samples. A failed call
    (a dead server) is a forfeit: it scores as a miss, its reason is kept in the item's ``errors``
    and each benchmark counts its ``forfeits``.
    ``progress(benchmark, done, total)`` is called after every batch of completions. Each benchmark's
    result holds ``items_sha256``, the fingerprint of the questions scored (id, prompt, gold), which
    :func:`record_looks` writes into the evaluation ledger.
    """
    paths = dict(paths or {})
    scorer = Scorer()
    out: dict[str, Any] = {
        "model": policy_name(policy),  # a caller may record its own name
        "decoding": {},  # and the settings it sampled with (``spyrl eval`` records its flags)
        "protocol": {"math_suffix": MATH_SUFFIX, "mc_suffix": MC_SUFFIX, "scoring": "math-verify, gold first"},
        "seed": seed,
        "limit": limit,
        "results": {},
    }
    try:
        for name in benchmarks:
            benchmark = BENCHMARKS.get(name)
            if benchmark is None:
                raise ValueError(f"unknown benchmark {name!r}; known: {sorted(BENCHMARKS)}")
            items = load_items(name, path=paths.get(name), limit=limit, seed=seed)
            samples = k or benchmark.default_k
            requests = [(i, item) for i, item in enumerate(items) for _ in range(samples)]
            completions: list[Action] = []
            for start in range(0, len(requests), batch_size):
                chunk = requests[start : start + batch_size]
                completions += call_policy(policy, [_observation(item.prompt) for _, item in chunk])
                done = min(start + batch_size, len(requests))
                logger.debug("%s: %d/%d completions", name, done, len(requests))
                if progress is not None:
                    progress(name, done, len(requests))
            questions = fingerprint([[item.id, item.prompt, item.gold] for item in items])
            scores = _score(items, requests, completions, scorer)
            out["results"][name] = {"n": len(items), "k": samples, "items_sha256": questions, **scores}
    finally:
        scorer.close()
    average = card_average(out)
    if average is not None:
        out["card_average"] = average
    return out


def record_looks(results: Mapping[str, Any], look: Look | None = None) -> None:
    """One look per benchmark of ``results`` (:func:`evaluate`'s) in the evaluation ledger, recorded as
    ``look`` says (default: the results' model, the default ledger): the questions' fingerprint
    (``items_sha256``) and the accuracy over questions with its bootstrap interval. ``spyrl eval`` calls it
    once its results are scored."""
    look = look or Look()
    for name, result in results["results"].items():
        accuracy = bootstrap([float(np.mean(item["correct"])) for item in result["items"]])
        look.record(name, result["items_sha256"], results["model"], headline("accuracy", **accuracy.to_dict()))


def card_average(results: Mapping[str, Any]) -> dict[str, Any] | None:
    """The model card's headline quantity: the mean accuracy over its seven benchmarks (the card reports the
    gain of this mean, "+8.97% across seven benchmarks"), or None unless all seven were run: an average over
    fewer is not the card's. Two of the seven are a guess (``guessed``): the card names only five.

    >>> card_average({"results": {n: {"accuracy": 0.5} for n in CARD_BENCHMARKS}})["accuracy"]
    0.5
    >>> card_average({"results": {"gsm8k": {"accuracy": 0.9}}}) is None
    True
    """
    runs = results["results"]
    if any(name not in runs for name in CARD_BENCHMARKS):
        return None
    return {
        "accuracy": float(np.mean([runs[name]["accuracy"] for name in CARD_BENCHMARKS])),
        "benchmarks": list(CARD_BENCHMARKS),
        "guessed": list(GUESSED_BENCHMARKS),
    }


def _score(items: Sequence[Any], requests: Sequence[tuple[int, Any]], completions: Sequence[Action], scorer: Scorer):
    """``accuracy``, ``forfeits`` (failed calls, scored as misses) and per-item records."""
    per_item: list[dict[str, Any]] = [
        {"id": item.id, "gold": item.gold, "answers": [], "correct": [], "errors": []} for item in items
    ]
    for (i, item), action in zip(requests, completions, strict=True):
        completion = action.text
        answer = mc_letter(completion) if item.kind == "mc" else extract_answer(completion)
        per_item[i]["answers"].append(answer)
        per_item[i]["correct"].append(scorer.score(item.gold, completion, item.kind))
        per_item[i]["errors"].append(safe_reason(action.error))
    accuracy = float(np.mean([np.mean(r["correct"]) for r in per_item]))
    forfeits = sum(bool(e) for r in per_item for e in r["errors"])
    return {"accuracy": accuracy, "forfeits": forfeits, "items": per_item}


def save_results(results: Mapping[str, Any], path: str | os.PathLike) -> Path:
    return write_text(path, json.dumps(results, indent=2, default=str))


AVERAGE_COLUMN = "card's 7 avg (aime24, mmlu_pro guessed)"


def results_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """Markdown table: one row per run, one column per benchmark (accuracy %, avg@k), and when a run has all
    seven of the card's benchmarks their mean (:func:`card_average`) with its gain over the first run's."""
    names = sorted({b for run in runs for b in run["results"]})
    averages = [card_average(run) for run in runs]
    extra = [AVERAGE_COLUMN] if any(a is not None for a in averages) else []
    head = "| model | " + " | ".join(names + extra) + " |"
    lines = [head, "|---" * (len(names) + len(extra) + 1) + "|"]
    for run, average in zip(runs, averages, strict=True):
        cells = []
        for name in names:
            r = run["results"].get(name)
            cells.append("-" if r is None else f"{100 * r['accuracy']:.1f} (n={r['n']}, k={r['k']})")
        if extra:
            cells.append(_average_cell(average, averages[0]))
        lines.append(f"| {run['model']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _average_cell(average: Mapping[str, Any] | None, first: Mapping[str, Any] | None) -> str:
    if average is None:
        return "-"
    cell = f"{100 * average['accuracy']:.2f}"
    if first is not None and first is not average:
        cell += f" ({100 * (average['accuracy'] - first['accuracy']):+.2f})"
    return cell


def plot_results(runs: Sequence[Mapping[str, Any]], path: str | os.PathLike) -> Path:
    """A grouped bar chart comparing runs per benchmark."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({b for run in runs for b in run["results"]})
    width = 0.8 / max(1, len(runs))
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(names)), 3.6))
    for j, run in enumerate(runs):
        values = [100 * run["results"].get(n, {}).get("accuracy", 0.0) for n in names]
        ax.bar(np.arange(len(names)) + j * width, values, width, label=run["model"])
    ax.set_xticks(np.arange(len(names)) + width * (len(runs) - 1) / 2, names)
    ax.set_ylabel("accuracy (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def game_evaluation(
    policy: Any, name: str, num_games: int, *, seed: int = 0, config: Any = None, max_forfeit_rate: float = 0.1
):
    """The model against the heuristic and random baselines at mixed tables (a tournament)."""
    import agents
    from spyrl.evaluation.tournament import run_tournament

    policies = {
        name: policy,
        "heuristic": agents.load("heuristic", seed=seed),
        "random": agents.load("random", seed=seed),
    }
    return run_tournament(policies, num_games, config=config, seed=seed, max_forfeit_rate=max_forfeit_rate)
