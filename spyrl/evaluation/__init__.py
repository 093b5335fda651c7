"""Evaluation: the paper's math benchmarks (math-verify scoring) and game-level metrics."""

from spyrl.evaluation.benchmarks import BENCHMARKS, CARD_BENCHMARKS, GUESSED_BENCHMARKS, load_items, token_budget
from spyrl.evaluation.run import card_average, evaluate, game_evaluation, plot_results, results_table, save_results
from spyrl.evaluation.scoring import Scorer, extract_answer, math_equal, mc_letter

__all__ = [
    "BENCHMARKS",
    "CARD_BENCHMARKS",
    "GUESSED_BENCHMARKS",
    "Scorer",
    "card_average",
    "evaluate",
    "extract_answer",
    "game_evaluation",
    "load_items",
    "math_equal",
    "mc_letter",
    "plot_results",
    "results_table",
    "save_results",
    "token_budget",
]
