"""What the viewer page shows, as plain JSON-ready data built from buffers, runs and tournaments.

Everything here is data, never markup: texts from models and documents are passed through
unchanged and the page renders them with ``textContent`` only (see :mod:`spyrl.viewer.page`).

What the buffer does not record and is reconstructed here:

- **The source and the spy's copy.** Buffer rows carry the prompts, not ``info["truth"]``. The
  source is the civilians' copy and the spy's copy is the spy's, both read between the
  ``<document>`` tags of the performing prompt (the built-in templates put them there; with other
  templates the whole user message stands in). The spans the spy lost or saw changed are a
  word-level diff of the two copies (:func:`copy_spans`), so they are exact for every operator
  that edits the text in place (``mask_spans``, ``drop_sentences``, ``perturb_numbers``).
- **The degradation operator** of a buffer written before rows recorded it (the ``degrade``
  column), named from that diff (:func:`degradation_of`) unless its run or tournament recorded
  ``degrade`` in its config. Newer rows name the operator that ran, a user's own included.

Per-token log-probabilities are kept as one character each, in steps of 0.1 nats down to -8.8
(lower values are shown as -8.8: p < 0.00015 colours the same), which keeps an LLM buffer's page
a few times smaller than decimal numbers would (:func:`encode_logprobs`). The buffer stores token ids but not token
texts; with a tokenizer (``spyrl view --tokenizer``, or a run's latest checkpoint) each token is
decoded alone, otherwise the page draws a heat strip over the log-prob values alone.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from spy_env.io import folder_file, read_folder_file, read_json
from spy_env.stage import Stage

logger = logging.getLogger(__name__)

__all__ = [
    "Decoder",
    "buffer_payload",
    "copy_spans",
    "decode_logprobs",
    "degradation_of",
    "encode_logprobs",
    "game_records",
    "input_kind",
    "load_tokenizer",
    "run_payload",
    "tournament_payload",
]

# token ids -> one text per token (for the log-prob heat strip)
Decoder = Callable[[Sequence[int]], list[str]]

_DOCUMENT = re.compile(r"<document>\n(.*?)\n</document>", re.DOTALL)
_WORDS = re.compile(r"\S+\s*|\s+")  # a word with the whitespace after it
_NUMBER = re.compile(r"^[-+]?\$?\d[\d.,]*\$?[.,;:)]?$")
_ITERATION_FILE = re.compile(r"iter_(\d+)")
# The buffer columns the page needs (token ids of prompts are large and unused).
_COLUMNS = (
    "run_id",
    "game_id",
    "document_id",
    "round",
    "stage",
    "seat",
    "role",
    "agent_name",
    "policy_version",
    "prompt",
    "completion",
    "completion_token_ids",
    "logprobs",
    "finish_reason",
    "error",
    "violations",
    "vote",
    "votes_received",
    "reward",
    "reward_detect",
    "reward_perform",
    "reward_penalty",
    "spy_seat",
    "spy_caught",
)


# ------------------------------------------------------------------ input kinds
def input_kind(path: str | os.PathLike) -> str:
    """``"buffer"``, ``"run"`` or ``"tournament"``; ``FileNotFoundError``/``ValueError`` otherwise."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{str(path)!r} does not exist")
    if path.is_dir():
        if (path / "metrics.jsonl").is_file():
            return "run"
        if (path / "summary.json").is_file():
            return "tournament"
        raise ValueError(
            f"{str(path)!r} is neither a training run (no metrics.jsonl) nor a tournament result (no summary.json)"
        )
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".jsonl"):
        return "buffer"
    if suffix == ".json":
        return "tournament"
    raise ValueError(
        f"{str(path)!r}: expected an episode buffer (.parquet/.jsonl), a run folder or a tournament result"
    )


# --------------------------------------------------------------------- reading
def _iter_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Buffer rows through the buffer's own reader (read by content, range-checked), only needed columns."""
    from spy_env.buffer import checked_row, read_dataset

    dataset = read_dataset(path).select_columns(list(_COLUMNS))
    number = 0
    for batch in dataset.iter(batch_size=2048):
        names = list(batch)
        for values in zip(*(batch[n] for n in names), strict=True):
            number += 1
            row = {
                k: v for k, v in checked_row(dict(zip(names, values, strict=True)), path, number).items() if k in batch
            }
            # Only the performing prompts of round 1 are read (for the copies); vote prompts are large.
            prompt = row.pop("prompt")
            row["copy"] = _copy_in(prompt) if row["stage"] == Stage.PERFORM and row["round"] == 0 else None
            yield row


def _games(rows: Iterable[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """Rows grouped by ``(run_id, game_id)``, in order of first appearance."""
    games: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for row in rows:
        games.setdefault((row["run_id"], row["game_id"]), []).append(row)
    return list(games.values())


def load_tokenizer(path: str | os.PathLike) -> Decoder:
    """A decoder from a ``tokenizer.json`` (or a folder holding one), through ``tokenizers``."""
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"no tokenizer.json at {str(path)!r}")
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise ImportError("decoding tokens needs `pip install tokenizers` (in the hf extra)") from e
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception for any bad file
        raise ValueError(f"{str(path)!r} is not a tokenizer.json ({' '.join(str(e).split())[:200]})") from e
    cache: dict[int, str] = {}

    def decode(ids: Sequence[int]) -> list[str]:
        out = []
        for i in ids:
            if i not in cache:
                cache[i] = tokenizer.decode([int(i)], skip_special_tokens=False)
            out.append(cache[i])
        return out

    return decode


# ------------------------------------------------------------------- the copies
def _copy_in(prompt: Sequence[Mapping[str, str]]) -> str:
    """A player's copy of the source from its performing prompt (see the module docstring)."""
    user = next((m["content"] for m in reversed(prompt) if m.get("role") == "user"), "")
    match = _DOCUMENT.search(user)
    return match.group(1) if match else user


def copy_spans(source: str, spy_copy: str) -> list[list[Any]]:
    """Where the spy's copy differs from the source: ``[start, end, replacement]`` in source offsets.

    ``source[start:end]`` was replaced by ``replacement`` (``""``: removed; ``start == end``:
    inserted). A copy whose words mostly do not come from the source (``neighbor``, ``blank``)
    is one span.

    >>> copy_spans("Tom has 3 red apples. He eats one.", "Tom has 5 red apples. [...]")
    [[8, 9, '5'], [22, 34, '[...]']]
    """
    if source == spy_copy:
        return []
    a, b = _WORDS.findall(source), _WORDS.findall(spy_copy)
    matcher = _matcher(a, b)
    if matcher is None:  # too repetitive to diff in bounded time: what lies between the common ends
        return [_between_common_ends(source, spy_copy)]
    words = sum(1 for w in b if not w.isspace())
    kept = sum(1 for m in matcher.get_matching_blocks() for w in b[m.b : m.b + m.size] if not w.isspace())
    if kept < 0.3 * words or not words:  # hardly a word of the copy comes from the source
        return [[0, len(source), spy_copy]]
    offsets = [0]
    for word in a:
        offsets.append(offsets[-1] + len(word))
    spans = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        start, end, replacement = offsets[i1], offsets[i2], "".join(b[j1:j2])
        while end > start and replacement and source[end - 1] == replacement[-1]:  # shared trailing space
            end, replacement = end - 1, replacement[:-1]
        spans.append([start, end, replacement])
    return spans


# The work a word diff may do: difflib's longest-match search visits, for every word of the
# source, every place that word occurs in the copy. A buffer's copies are untrusted text, and
# "a a a ..." against "a b a b ..." costs ~n^2 per search (20 s at 8k words); beyond this budget
# difflib's own popularity heuristic (autojunk) is used, and beyond it again no word diff at all
# (the longest embedded document costs ~1.2k).
_DIFF_BUDGET = 50_000


def _matcher(a: Sequence[str], b: Sequence[str]) -> difflib.SequenceMatcher | None:
    """A word matcher whose work stays within :data:`_DIFF_BUDGET`, or ``None``."""
    counts: dict[str, int] = {}
    for word in b:
        counts[word] = counts.get(word, 0) + 1
    if sum(counts.get(word, 0) for word in a) <= _DIFF_BUDGET:
        return difflib.SequenceMatcher(None, a, b, autojunk=False)
    popular = len(b) // 100 + 1 if len(b) >= 200 else len(b) + 1  # difflib's autojunk rule
    if sum(n for word in a if (n := counts.get(word, 0)) <= popular) <= _DIFF_BUDGET:
        return difflib.SequenceMatcher(None, a, b, autojunk=True)
    return None


def _between_common_ends(source: str, spy_copy: str) -> list[Any]:
    """One span: ``source`` less its longest common prefix and suffix with ``spy_copy``."""
    shortest = min(len(source), len(spy_copy))
    start = next((i for i in range(shortest) if source[i] != spy_copy[i]), shortest)
    tail = next((i for i in range(shortest - start) if source[-1 - i] != spy_copy[-1 - i]), shortest - start)
    return [start, len(source) - tail, spy_copy[start : len(spy_copy) - tail]]


def degradation_of(source: str, spy_copy: str, spans: Sequence[Sequence[Any]]) -> str:
    """The operator that most plausibly made ``spy_copy`` from ``source`` (a label for filtering).

    >>> degradation_of("a 3 b", "a 5 b", [[2, 3, "5"]])
    'perturb_numbers'
    """
    if not spans:
        return "none"
    if not spy_copy.strip():
        return "blank"
    replacements = [str(s[2]).strip() for s in spans]
    if any("[…]" in r or "[...]" in r for r in replacements):
        return "mask_spans"
    if len(spans) == 1 and spans[0][0] == 0 and spans[0][1] == len(source):
        return "neighbor"
    originals = [source[s[0] : s[1]].strip() for s in spans]
    if all(_NUMBER.match(o) and _NUMBER.match(r) for o, r in zip(originals, replacements, strict=True)):
        return "perturb_numbers"
    if not any(replacements):
        return "drop_sentences"
    return "other"


# ------------------------------------------------------------------- log-probs
# Printable ASCII without the characters JSON or the page's escaping would lengthen (" \ < > &).
LOGPROB_ALPHABET = "".join(c for c in map(chr, range(33, 127)) if c not in '"\\<>&')
LOGPROB_STEP = 0.1


def encode_logprobs(logprobs: Iterable[float]) -> str:
    """One character per token: ``LOGPROB_ALPHABET[round(-logprob / 0.1)]``, clipped to the alphabet.

    >>> encode_logprobs([0.0, -0.14, -2.0, -50.0, float("nan")])
    '!#7~~'
    >>> decode_logprobs(encode_logprobs([0.0, -0.14, -2.0]))
    [0.0, -0.1, -2.0]
    """
    top = len(LOGPROB_ALPHABET) - 1
    out = []
    for value in logprobs:
        level = round(-float(value) / LOGPROB_STEP) if math.isfinite(value) else top
        out.append(LOGPROB_ALPHABET[min(max(level, 0), top)])
    return "".join(out)


def decode_logprobs(text: str) -> list[float]:
    """The log-probs an :func:`encode_logprobs` string stands for (what the page shows)."""
    return [round(-LOGPROB_ALPHABET.index(c) * LOGPROB_STEP, 1) for c in text]


# -------------------------------------------------------------------- the games
def _entry(row: Mapping[str, Any], decode: Decoder | None) -> dict[str, Any]:
    """One action of one player, compact."""
    entry: dict[str, Any] = {
        "t": row["completion"] or "",
        "r": [round(float(row[k] or 0.0), 4) for k in ("reward", "reward_detect", "reward_perform", "reward_penalty")],
    }
    if row["logprobs"]:
        entry["lp"] = encode_logprobs(row["logprobs"])
        ids = row["completion_token_ids"] or []
        if decode is not None and len(ids) == len(row["logprobs"]):
            entry["tok"] = decode(ids)
    for key, name in (("violations", "viol"), ("error", "err"), ("finish_reason", "fin")):
        if row[key]:
            entry[name] = list(row[key]) if key == "violations" else row[key]
    if row["stage"] == Stage.VOTE:
        entry["vote"] = int(row["vote"])
    entry["recv"] = int(row["votes_received"])
    return entry


def game_records(
    rows: Iterable[Mapping[str, Any]],
    documents: dict[str, dict[str, str]],
    *,
    decode: Decoder | None = None,
    degrade: str | None = None,
    max_games: int | None = None,
) -> list[dict[str, Any]]:
    """Compact game records (at most ``max_games``) from buffer rows; source texts go once into ``documents``."""
    games = []
    span_cache: dict[tuple[str, str], list[list[Any]]] = {}
    for rows_of_game in _games(rows):
        if max_games is not None and len(games) >= max_games:
            break
        first = rows_of_game[0]
        n_players = max(int(r["seat"]) for r in rows_of_game) + 1
        spy = int(first["spy_seat"])
        seats: list[dict[str, str]] = [{"agent": "", "role": ""} for _ in range(n_players)]
        rounds: dict[int, dict[str, list[Any]]] = {}
        copies: dict[str, str] = {}
        for row in rows_of_game:
            seat, stage = int(row["seat"]), row["stage"]
            seats[seat] = {"agent": row["agent_name"], "role": row["role"]}
            slot = rounds.setdefault(int(row["round"]), {"perform": [None] * n_players, "vote": [None] * n_players})
            if stage in slot:
                slot[stage][seat] = _entry(row, decode)
            if stage == "perform" and int(row["round"]) == 0:
                role = "spy" if seat == spy else "civilian"
                copies.setdefault(role, row["copy"] if "copy" in row else _copy_in(row["prompt"]))
        source = copies.get("civilian", copies.get("spy", ""))
        spy_copy = copies.get("spy", source)
        key = hashlib.sha1(f"{first['document_id']}\0{source}".encode()).hexdigest()[:12]
        documents.setdefault(key, {"id": first["document_id"], "text": source})
        if (source, spy_copy) not in span_cache:
            span_cache[(source, spy_copy)] = copy_spans(source, spy_copy)
        spans = span_cache[(source, spy_copy)]
        games.append(
            {
                "run": first["run_id"],
                "id": int(first["game_id"]),
                "doc": first["document_id"],
                "src": key,
                "it": int(first["policy_version"]),
                "pv": int(first["policy_version"]),
                "spy": spy,
                "caught": bool(first["spy_caught"]),
                "deg": first.get("degrade") or degrade or degradation_of(source, spy_copy, spans),
                "spans": spans,
                "nviol": sum(bool(r["violations"]) for r in rows_of_game),
                "seats": seats,
                "rounds": [rounds[r] for r in sorted(rounds)],
            }
        )
    return games


def _clean(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become ``None`` (``JSON.parse`` rejects NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def buffer_payload(
    path: str | os.PathLike, *, decode: Decoder | None = None, max_games: int | None = None
) -> dict[str, Any]:
    """The page data of one episode buffer."""
    path = Path(path)
    documents: dict[str, dict[str, str]] = {}
    games = game_records(_iter_rows(path), documents, decode=decode, max_games=max_games)
    return {"kind": "buffer", "title": path.name, "documents": documents, "games": games}


def _latest_tokenizer(run_dir: Path) -> Decoder | None:
    """The tokenizer of a run's newest checkpoint, when there is one and ``tokenizers`` is installed."""
    candidates = sorted(run_dir.glob("checkpoints/iter_*/model/tokenizer.json"))
    if not candidates:
        return None
    tokenizer = folder_file(run_dir, candidates[-1].relative_to(run_dir))
    try:
        return load_tokenizer(tokenizer) if tokenizer else None
    except ImportError:
        logger.info("tokenizers is not installed: heat strips without token texts")
        return None


def run_payload(
    run_dir: str | os.PathLike,
    *,
    decode: Decoder | None = None,
    games_per_iteration: int = 6,
) -> dict[str, Any]:
    """The page data of a ``spyrl train`` folder: metrics, held-out evaluation, sample games per iteration."""
    from trainers.sinks import read_metrics

    run_dir = Path(run_dir)
    folder_file(run_dir, "metrics.jsonl")  # a link out of the run is refused
    metrics = [_clean(row) for row in read_metrics(run_dir)]
    if decode is None:
        decode = _latest_tokenizer(run_dir)
    documents: dict[str, dict[str, str]] = {}
    games: list[dict[str, Any]] = []
    buffers = sorted(run_dir.glob("buffers/iter_*.parquet")) + sorted(run_dir.glob("buffers/iter_*.jsonl"))
    for buffer in buffers:
        folder_file(run_dir, buffer.relative_to(run_dir))  # a link out of the run is refused
        found = _ITERATION_FILE.search(buffer.name)
        # iter_00000 holds the games of the iteration that metrics.jsonl logs as iteration 1
        iteration = int(found.group(1)) + 1 if found else None
        records = game_records(_iter_rows(buffer), documents, decode=decode, max_games=games_per_iteration)
        for record in records:
            if iteration is not None:
                record["it"] = iteration
        games.extend(records)
    return {
        "kind": "run",
        "title": run_dir.resolve().name,
        "documents": documents,
        "games": games,
        "run": {"metrics": metrics, "games_per_iteration": games_per_iteration},
    }


def tournament_payload(path: str | os.PathLike, *, decode: Decoder | None = None) -> dict[str, Any]:
    """The page data of a ``spyrl tournament`` result (its folder or its ``summary.json``)."""
    path = Path(path)
    summary_path = path / "summary.json" if path.is_dir() else path
    if path.is_dir():
        folder_file(path, "summary.json")
    summary = read_json(summary_path, "tournament summary")
    if not isinstance(summary, dict) or "metrics" not in summary:
        raise ValueError(f"{str(summary_path)!r} is not a tournament summary (no 'metrics')")
    for key in ("metrics", "ratings", "config"):
        if not isinstance(summary.get(key) or {}, dict):
            raise ValueError(f"{str(summary_path)!r} is not a tournament summary ({key!r} is not an object)")
    folder = summary_path.parent
    documents: dict[str, dict[str, str]] = {}
    games: list[dict[str, Any]] = []
    buffer = folder_file(folder, "games.parquet")
    degrade = (summary.get("config") or {}).get("degrade")
    if buffer is not None:
        games = game_records(_iter_rows(buffer), documents, decode=decode, degrade=degrade or None)
    chart = read_folder_file(folder, "chart.png", max_bytes=_MAX_CHART_BYTES)
    return {
        "kind": "tournament",
        "title": folder.resolve().name,
        "documents": documents,
        "games": games,
        "tournament": {
            "metrics": _clean(summary.get("metrics", {})),
            "ratings": _clean(summary.get("ratings", {})),
            "config": _clean(summary.get("config", {})),
            "chart": _png_data_uri(chart, folder / "chart.png") if chart is not None else None,
        },
    }


_MAX_CHART_BYTES = 16 * 2**20
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_data_uri(data: bytes, path: Path) -> str:
    import base64

    if not data.startswith(_PNG_SIGNATURE):
        raise ValueError(f"{str(path)!r} is not a PNG image")
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")
