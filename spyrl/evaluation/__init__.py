"""Evaluation: the paper's math benchmarks (math-verify scoring) and game-level metrics."""

from spyrl.evaluation.benchmarks import BENCHMARKS, load_items
from spyrl.evaluation.run import evaluate, game_evaluation, plot_results, results_table, save_results
from spyrl.evaluation.scoring import Scorer, extract_answer, math_equal, mc_letter

__all__ = [
    "BENCHMARKS",
    "Scorer",
    "evaluate",
    "extract_answer",
    "game_evaluation",
    "load_items",
    "math_equal",
    "mc_letter",
    "plot_results",
    "results_table",
    "save_results",
]
