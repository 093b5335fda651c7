"""The benchmarks (the five the model card names, the two guessed for its seven-benchmark average, two
extras): hub ids, splits, columns, prompts, gold answers and token budgets (docs/EVALUATION.md).

Every benchmark loads through ``datasets.load_dataset(path, config, split=...)``. ``path`` is the
hub id by default; a local folder laid out like the hub repository (a README with ``configs``)
or a data file goes through the same call, which is how the tests run offline.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spy_env.io import check_json_depth

__all__ = [
    "BENCHMARKS",
    "CARD_BENCHMARKS",
    "GUESSED_BENCHMARKS",
    "MATH_SUFFIX",
    "Benchmark",
    "Item",
    "load_items",
    "token_budget",
]

# The model card's headline is "+8.97% across seven benchmarks" and it names five of them (GSM8K, MATH500,
# AIME 25, Minerva, GPQA-Diamond). The other two are a guess (the design's reading of the paper's list):
# AIME24 and MMLU-Pro. An average over these seven is the card's average only if the guess is right.
CARD_BENCHMARKS = ("gsm8k", "math500", "aime24", "aime25", "minerva", "mmlu_pro", "gpqa_diamond")
GUESSED_BENCHMARKS = ("aime24", "mmlu_pro")

MATH_SUFFIX = "Please reason step by step, and put your final answer within \\boxed{}."
MC_SUFFIX = "Please reason step by step, and put the letter of the correct option within \\boxed{}."
LETTERS = "ABCDEFGHIJKLMNOP"


@dataclass(frozen=True)
class Item:
    """One question, ready to prompt and score."""

    id: str
    prompt: str
    gold: str
    kind: str  # "math" or "mc"


@dataclass(frozen=True)
class Benchmark:
    name: str
    path: str
    config: str | None
    split: str
    kind: str
    default_k: int
    build: Callable[[Mapping[str, Any], int, np.random.Generator], Item]
    # new tokens a completion may use: not stated by the card (our choice): generous for the set's solution
    # lengths so that a reasoning model is not cut short (short answers 4096, MATH-level 8192, competitions 16384)
    max_new_tokens: int = 8192


def _gsm8k_gold(answer: str) -> str:
    """Text after ``####``, commas removed.

    >>> _gsm8k_gold("She has 70 + 2 = 72 apples. #### 72"), _gsm8k_gold("#### 1,234")
    ('72', '1234')
    """
    return answer.split("####")[-1].strip().replace(",", "")


def _math_item(question_key: str, gold: Callable[[Mapping[str, Any]], str]):
    def build(row: Mapping[str, Any], index: int, rng: np.random.Generator) -> Item:
        question = str(row[question_key]).strip()
        return Item(str(row.get("id", row.get("unique_id", index))), f"{question}\n\n{MATH_SUFFIX}", gold(row), "math")

    return build


def _mc_prompt(question: str, options: list[str]) -> str:
    lines = [question.strip(), ""] + [f"{LETTERS[i]}. {str(o).strip()}" for i, o in enumerate(options)]
    return "\n".join(lines) + f"\n\n{MC_SUFFIX}"


def _mmlu_pro(row: Mapping[str, Any], index: int, rng: np.random.Generator) -> Item:
    options = list(row["options"])
    return Item(
        str(row.get("question_id", index)), _mc_prompt(row["question"], options), str(row["answer"]).strip(), "mc"
    )


def _gpqa(row: Mapping[str, Any], index: int, rng: np.random.Generator) -> Item:
    options = [row["Correct Answer"], row["Incorrect Answer 1"], row["Incorrect Answer 2"], row["Incorrect Answer 3"]]
    order = rng.permutation(4)  # seeded per run: the correct option lands on a fixed, seed-dependent letter
    shuffled = [options[i] for i in order]
    gold = LETTERS[int(np.flatnonzero(order == 0)[0])]
    return Item(str(row.get("Record ID", index)), _mc_prompt(row["Question"], shuffled), gold, "mc")


def _strip_degree(value: Any) -> str:
    return re.sub(r"\^\s*\{?\\circ\}?", "", str(value)).strip()


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in [
        Benchmark("gsm8k", "openai/gsm8k", "main", "test", "math", 1, _math_item("question", lambda r: _gsm8k_gold(r["answer"])), 4096),
        Benchmark("math500", "HuggingFaceH4/MATH-500", None, "test", "math", 1, _math_item("problem", lambda r: str(r["answer"])), 8192),
        Benchmark("aime24", "HuggingFaceH4/aime_2024", None, "train", "math", 8, _math_item("problem", lambda r: str(r["answer"])), 16384),
        Benchmark("aime25", "math-ai/aime25", None, "test", "math", 8, _math_item("problem", lambda r: _strip_degree(r["answer"])), 16384),
        Benchmark("minerva", "math-ai/minervamath", None, "test", "math", 1, _math_item("question", lambda r: str(r["answer"])), 8192),
        Benchmark("mmlu_pro", "TIGER-Lab/MMLU-Pro", None, "test", "mc", 1, _mmlu_pro, 4096),
        Benchmark("gpqa_diamond", "Idavidrein/gpqa", "gpqa_diamond", "train", "mc", 4, _gpqa, 8192),
        Benchmark("amc23", "math-ai/amc23", None, "test", "math", 8, _math_item("question", lambda r: str(r["answer"])), 16384),
        Benchmark("olympiadbench", "math-ai/olympiadbench", None, "test", "math", 1,
                  _math_item("question", lambda r: str(next(iter(r["final_answer"]))).strip("$ ")), 16384),
    ]
}  # fmt: skip


def token_budget(names: Sequence[str]) -> int:
    """New tokens per completion for a run over ``names``: the largest of their budgets (``Benchmark.max_new_tokens``),
    so that no benchmark of the run is cut short.

    >>> token_budget(["gsm8k"]), token_budget(["gsm8k", "aime25"])
    (4096, 16384)
    """
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown or not names:
        raise ValueError(f"unknown benchmark {unknown[0] if unknown else ''!r}; known: {sorted(BENCHMARKS)}")
    return max(BENCHMARKS[n].max_new_tokens for n in names)


def load_items(
    name: str, *, path: str | None = None, limit: int | None = None, seed: int = 0, **load_kwargs: Any
) -> list[Item]:
    """The first ``limit`` items of a benchmark (``path`` overrides the hub id, e.g. a local folder)."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; known: {sorted(BENCHMARKS)}")
    benchmark = BENCHMARKS[name]
    from datasets import load_dataset

    source = path or benchmark.path
    config = benchmark.config
    if path and (path.endswith((".jsonl", ".json", ".parquet"))):
        kind = "parquet" if path.endswith(".parquet") else "json"
        if kind == "json":  # before pyarrow's JSON reader, which recurses in C (a segfault at 10,000 levels)
            check_json_depth(Path(path).read_bytes(), f"benchmark file {path!r}")
        dataset = load_dataset(kind, data_files=path, split="train", **load_kwargs)
    else:
        dataset = load_dataset(source, config, split=benchmark.split, **load_kwargs)
    rng = np.random.default_rng(seed)
    items = []
    for index, row in enumerate(dataset):
        if limit is not None and index >= limit:
            break
        try:
            items.append(benchmark.build(row, index, rng))
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(
                f"benchmark {name} at {source!r}: row {index + 1} lacks what {name} needs ({type(e).__name__}: {e}); "
                f"columns: {sorted(row) if isinstance(row, dict) else type(row).__name__}"
            ) from e
    if not items:
        raise ValueError(f"benchmark {name} at {source!r} has no rows")
    return items
