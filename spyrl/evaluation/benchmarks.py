"""The benchmarks (the five the model card names, the two guessed for its seven-benchmark average, two
extras): hub ids, splits, columns, prompts, gold answers and token budgets (docs/EVALUATION.md).

A benchmark loads from its hub id through ``datasets.load_dataset(path, config, split=...)``. A local
copy (``--data NAME=PATH``: a ``.jsonl``/``.json``/``.parquet`` file, or a folder laid out like the hub
repository, a README with ``configs``, which is how the tests run offline) is read afresh by
:func:`spy_env.corpus.read_rows` every time, never through the ``datasets`` cache (keyed by a file's
path, size and modification time, it would score the old questions of a file replaced by one of the
same size and time): rows as they come, ``--limit`` honoured while reading, and a file that is not a
regular file, not JSON, nested too deep or without the benchmark's columns is one ``ValueError``
naming the file and the line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spy_env.corpus import ROW_FILE_KINDS, read_rows

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
        Benchmark(
            "gsm8k",
            "openai/gsm8k",
            "main",
            "test",
            "math",
            1,
            _math_item("question", lambda r: _gsm8k_gold(r["answer"])),
            4096,
        ),
        Benchmark(
            "math500",
            "HuggingFaceH4/MATH-500",
            None,
            "test",
            "math",
            1,
            _math_item("problem", lambda r: str(r["answer"])),
            8192,
        ),
        Benchmark(
            "aime24",
            "HuggingFaceH4/aime_2024",
            None,
            "train",
            "math",
            8,
            _math_item("problem", lambda r: str(r["answer"])),
            16384,
        ),
        Benchmark(
            "aime25",
            "math-ai/aime25",
            None,
            "test",
            "math",
            8,
            _math_item("problem", lambda r: _strip_degree(r["answer"])),
            16384,
        ),
        Benchmark(
            "minerva",
            "math-ai/minervamath",
            None,
            "test",
            "math",
            1,
            _math_item("question", lambda r: str(r["answer"])),
            8192,
        ),
        Benchmark("mmlu_pro", "TIGER-Lab/MMLU-Pro", None, "test", "mc", 1, _mmlu_pro, 4096),
        Benchmark("gpqa_diamond", "Idavidrein/gpqa", "gpqa_diamond", "train", "mc", 4, _gpqa, 8192),
        Benchmark(
            "amc23", "math-ai/amc23", None, "test", "math", 8, _math_item("question", lambda r: str(r["answer"])), 16384
        ),
        Benchmark(
            "olympiadbench",
            "math-ai/olympiadbench",
            None,
            "test",
            "math",
            1,
            _math_item("question", lambda r: str(next(iter(r["final_answer"]))).strip("$ ")),
            16384,
        ),
    ]
}


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
    """The first ``limit`` items of a benchmark. ``path`` is a local file or folder (read afresh, see the
    module docstring) or a hub id in place of the benchmark's; ``load_kwargs`` go to ``load_dataset``."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; known: {sorted(BENCHMARKS)}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be None or >= 1, got {limit!r}")
    benchmark = BENCHMARKS[name]
    source = path or benchmark.path
    local = path is not None and (Path(path).suffix.lower() in ROW_FILE_KINDS or Path(path).exists())
    rows = _local_rows(benchmark, Path(source)) if local else _hub_rows(benchmark, source, **load_kwargs)
    rng = np.random.default_rng(seed)
    items = []
    try:
        for where, row in rows:
            items.append(_item(benchmark, where, row, len(items), rng))
            if limit is not None and len(items) >= limit:
                break  # before the next row: a local file is read no further
    finally:
        rows.close()
    if not items:
        raise ValueError(f"benchmark {name} at {source!r} has no rows")
    return items


def _item(benchmark: Benchmark, where: str, row: Any, index: int, rng: np.random.Generator) -> Item:
    """``benchmark.build`` of one row; a row that is not JSON or lacks a column is a ``ValueError`` naming ``where``."""
    if isinstance(row, ValueError):  # a line that does not parse (read_rows names it)
        raise row
    try:
        return benchmark.build(row, index, rng)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError, StopIteration) as e:
        columns = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise ValueError(
            f"{where} lacks what {benchmark.name} needs ({type(e).__name__}: {e}); columns: {columns}"
        ) from e


def _local_rows(benchmark: Benchmark, path: Path) -> Iterator[tuple[str, Any]]:
    """Rows of a local file, or of the files of ``benchmark.split`` in a folder laid out like the hub repository."""
    if not path.is_dir():
        yield from read_rows(path, "benchmark file")
        return
    for file in _split_files(benchmark, path):
        yield from read_rows(file, "benchmark file")


def _split_files(benchmark: Benchmark, folder: Path) -> list[str]:
    """The data files of ``benchmark``'s config and split in ``folder``, found by the rules ``datasets``
    applies to a hub repository (its README's ``configs``, else the file names), without reading them."""
    import datasets

    try:
        data_files = datasets.load_dataset_builder(str(folder), benchmark.config).config.data_files or {}
    except Exception as e:  # a README that is not YAML, an unknown config: whatever datasets raised, one line
        first_line = str(e).splitlines()[0] if str(e) else ""
        raise ValueError(f"benchmark folder {str(folder)!r} cannot be read ({type(e).__name__}: {first_line})") from e
    if benchmark.split not in data_files:
        raise ValueError(
            f"benchmark folder {str(folder)!r} has no split {benchmark.split!r} for {benchmark.name}; "
            f"splits: {sorted(data_files)}"
        )
    return list(data_files[benchmark.split])


def _hub_rows(benchmark: Benchmark, source: str, **load_kwargs: Any) -> Iterator[tuple[str, Any]]:
    from datasets import load_dataset

    dataset = load_dataset(source, benchmark.config, split=benchmark.split, **load_kwargs)
    for index, row in enumerate(dataset):
        yield f"benchmark {benchmark.name} at {source!r} row {index + 1}", row
