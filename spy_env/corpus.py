"""Source documents: the embedded corpus, Nemotron-CC-Math-v1, and local parquet/JSONL files.

A corpus is a list of :class:`Document` rows in Nemotron-CC-Math-v1's schema (``id``,
``text``, ``metadata``). Every source goes through :func:`documents_from_rows`, which applies
the same filters (length bounds, dedup, truncation) and counts what it skipped and why.

Sources accepted by :func:`load_corpus`:

- ``"embedded"``: 80 original documents shipped with the package (17 topics).
- ``"nemotron"`` / ``"nemotron:4plus"``: ``nvidia/Nemotron-CC-Math-v1`` streamed with
  ``datasets`` (configs ``3``, ``4plus``, ``4plus_MIND``; gated, needs ``HF_TOKEN``).
- ``"govreport[:SPLIT]"`` / ``"writingprompts[:SPLIT]"``: the paper's summarisation and creative
  writing sources, streamed (:mod:`spy_env.task_corpora`).
- ``"hf:ID[:CONFIG]"``: any hub data set with a ``text`` column, streamed.
- a path to a ``.parquet``, ``.jsonl``/``.json`` file or a folder of them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Protocol

from spy_env.degrade import sentence_spans
from spy_env.io import parse_json
from spy_env.parsing import clean_text

logger = logging.getLogger(__name__)

__all__ = [
    "DOCUMENT_SPLITS",
    "HELDOUT_FRACTION",
    "NEMOTRON_CONFIGS",
    "NEMOTRON_ID",
    "CorpusFilter",
    "CorpusStats",
    "Document",
    "documents_from_rows",
    "load_corpus",
    "load_embedded",
    "load_hub",
    "load_local",
    "split_documents",
]

NEMOTRON_ID = "nvidia/Nemotron-CC-Math-v1"
NEMOTRON_CONFIGS = ("3", "4plus", "4plus_MIND")


@dataclass(frozen=True)
class Document:
    """One source document x."""

    id: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)


HELDOUT_SALT = "spyrl-heldout-v1"
HELDOUT_FRACTION = 0.2  # the share every preset, the leaderboard sets and ``--documents heldout`` hold out
DOCUMENT_SPLITS = ("all", "train", "heldout")


def is_heldout(document_id: str, fraction: float = HELDOUT_FRACTION, salt: str = HELDOUT_SALT) -> bool:
    """Whether a document belongs to the held-out split: a hash of its id, not its position.

    The split is stable when a corpus is reordered, filtered or grown, so the same documents are
    held out by training (never played) and by every evaluation (only played there).

    >>> is_heldout("doc-1", 0.0), is_heldout("doc-1", 1.0)
    (False, True)
    """

    digest = hashlib.sha256(f"{salt}:{document_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def split_documents(
    documents: Sequence[Document], fraction: float = HELDOUT_FRACTION, salt: str = HELDOUT_SALT
) -> tuple[list[Document], list[Document]]:
    """``(train, heldout)``: the documents :func:`is_heldout` keeps for training and for evaluation."""
    if not 0 <= fraction < 1:
        raise ValueError(f"held-out fraction must be in [0, 1), got {fraction!r}")
    train, heldout = [], []
    for doc in documents:
        (heldout if is_heldout(doc.id, fraction, salt) else train).append(doc)
    return train, heldout


@dataclass(frozen=True)
class CorpusFilter:
    """Which rows become documents.

    Lengths are measured in ``unit``: characters, whitespace words, or tokens of ``tokenizer``
    (a callable ``str -> list``; e.g. ``AutoTokenizer.from_pretrained(...).encode``).
    Documents longer than ``truncate`` units are cut at the last sentence end that fits.
    """

    min_length: int = 100
    max_length: int | None = None
    truncate: int | None = 12_000
    unit: Literal["chars", "words", "tokens"] = "chars"
    dedup: bool = True
    tokenizer: Callable[[str], Sequence[Any]] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.unit not in ("chars", "words", "tokens"):
            raise ValueError(f"CorpusFilter.unit must be 'chars', 'words' or 'tokens', got {self.unit!r}")
        if self.unit == "tokens" and self.tokenizer is None:
            raise ValueError("CorpusFilter.tokenizer is required when unit='tokens'")
        if self.min_length < 0:
            raise ValueError(f"CorpusFilter.min_length must be >= 0, got {self.min_length}")
        for name in ("max_length", "truncate"):
            value = getattr(self, name)
            if value is not None and value < max(1, self.min_length):
                raise ValueError(f"CorpusFilter.{name} must be None or >= min_length ({self.min_length}), got {value}")

    def length(self, text: str) -> int:
        if self.unit == "chars":
            return len(text)
        if self.unit == "words":
            return len(text.split())
        assert self.tokenizer is not None
        return len(self.tokenizer(text))

    def cut(self, text: str) -> str:
        """Truncate ``text`` to at most ``truncate`` units, at a sentence end when possible."""
        if self.truncate is None or self.length(text) <= self.truncate:
            return text
        lo, hi = 0, len(text)  # longest prefix (in chars) that fits, by bisection
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.length(text[:mid]) <= self.truncate:
                lo = mid
            else:
                hi = mid - 1
        prefix = text[:lo]
        ends = [end for _, end in sentence_spans(prefix) if end < lo]
        cut = ends[-1] if ends and ends[-1] > lo // 2 else lo
        return prefix[:cut].rstrip()


@dataclass
class CorpusStats:
    """What a load kept and skipped (by reason)."""

    kept: int = 0
    truncated: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def __str__(self) -> str:
        skipped = ", ".join(f"{k}={v}" for k, v in sorted(self.skipped.items())) or "none"
        return f"kept {self.kept} documents ({self.truncated} truncated); skipped: {skipped}"


def documents_from_rows(
    rows: Iterable[Any],
    filt: CorpusFilter | None = None,
    *,
    max_documents: int | None = None,
    source: str = "corpus",
) -> tuple[list[Document], CorpusStats]:
    """Turn raw rows into documents, skipping broken ones; raise if none is usable.

    A row is skipped (and counted) when it is a JSON line that does not parse (``bad_json``), not
    a mapping (``not_a_row``), its ``text`` is
    missing or not a string (``no_text``), blank (``empty``), outside the length bounds
    (``too_short``/``too_long``) or a duplicate (``duplicate``).
    """
    filt = filt or CorpusFilter()
    stats = CorpusStats()
    seen: set[bytes] = set()
    docs: list[Document] = []
    for i, row in enumerate(rows):
        if max_documents is not None and len(docs) >= max_documents:
            break
        text, skipped = _usable_text(row, filt, seen)
        if text is None:
            stats.skipped[skipped] += 1
            continue
        cut = filt.cut(text)
        stats.truncated += cut is not text
        metadata = row.get("metadata")
        docs.append(
            Document(
                id=str(row.get("id") or f"{source}-{i}"),
                text=cut,
                metadata=dict(metadata) if isinstance(metadata, Mapping) else {},
            )
        )
    stats.kept = len(docs)
    if not docs:
        raise ValueError(f"{source} has no usable document ({stats})")
    if stats.skipped:  # broken rows deserve a word; filtered ones (length, duplicates) are routine
        broken = {"bad_json", "not_a_row", "no_text"} & set(stats.skipped)
        logger.log(logging.WARNING if broken else logging.INFO, "%s: %s", source, stats)
    return docs, stats


def _usable_text(row: Any, filt: CorpusFilter, seen: set[bytes]) -> tuple[str | None, str]:
    """A row's cleaned text, or None and why the row is skipped (``seen``: dedup keys so far)."""
    if isinstance(row, _BadRow):
        return None, "bad_json"
    if not isinstance(row, Mapping):
        return None, "not_a_row"
    text = row.get("text")
    if not isinstance(text, str):
        return None, "no_text"
    text = clean_text(text.replace("\r\n", "\n")).strip()
    if not text:
        return None, "empty"
    length = filt.length(text)
    if length < filt.min_length:
        return None, "too_short"
    if filt.max_length is not None and length > filt.max_length:
        return None, "too_long"
    if filt.dedup:
        key = hashlib.blake2b(" ".join(text.lower().split()).encode(), digest_size=16).digest()
        if key in seen:
            return None, "duplicate"
        seen.add(key)
    return text, ""


def load_embedded(filt: CorpusFilter | None = None) -> list[Document]:
    """The 80 original math documents shipped in ``spy_env/data/corpus.jsonl``."""
    path = resources.files("spy_env") / "data" / "corpus.jsonl"
    with path.open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return documents_from_rows(rows, filt, source="embedded corpus")[0]


def _datasets():
    try:
        import datasets
    except ImportError as e:  # pragma: no cover - core dependency
        raise ImportError("loading corpora needs `datasets`: pip install datasets") from e
    return datasets


def load_local(
    path: str | Path,
    filt: CorpusFilter | None = None,
    *,
    max_documents: int | None = None,
) -> list[Document]:
    """Documents from a local ``.parquet``/``.jsonl``/``.json`` file or a folder of them.

    Parquet goes through ``datasets.load_dataset`` (streaming), the same code path as hub
    corpora; JSON lines are read line by line, so a malformed line is skipped and counted
    (``bad_json``) instead of failing the file. An empty file is an error.
    """
    path = Path(path)
    if not path.exists():
        raise ValueError(f"corpus path {str(path)!r} does not exist")
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    by_kind: dict[str, list[str]] = {}
    for p in files:
        kind = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}.get(p.suffix.lower())
        if kind:
            by_kind.setdefault(kind, []).append(str(p))
    if len(by_kind) != 1:
        raise ValueError(
            f"corpus path {str(path)!r} must hold .parquet or .jsonl/.json files of one kind, "
            f"found {sorted(by_kind) or 'none'}"
        )
    [(kind, data_files)] = by_kind.items()
    if kind == "json":
        # Read line by line, not through datasets: there one malformed line fails the whole file.
        rows = _json_rows([Path(f) for f in data_files])
        return documents_from_rows(rows, filt, max_documents=max_documents, source=str(path))[0]
    try:
        stream = _datasets().load_dataset(kind, data_files=data_files, split="train", streaming=True)
        return documents_from_rows(stream, filt, max_documents=max_documents, source=str(path))[0]
    except ValueError:
        raise
    except Exception as e:  # a corrupt parquet file: name it, whatever pyarrow raised
        raise ValueError(f"corpus {str(path)!r} cannot be read ({type(e).__name__}: {e})") from e


class _BadRow:
    """A JSON line that does not parse; :func:`documents_from_rows` counts it as ``bad_json``."""


def _json_rows(files: Sequence[Path]) -> Iterator[Any]:
    """Rows of JSONL files (a ``.json`` file holding one array also works); a line that is not
    JSON yields a :class:`_BadRow` so it is skipped and counted, not fatal."""
    for file in files:
        data = file.read_bytes()
        if not data.strip():
            raise ValueError(f"corpus file {str(file)!r} is empty")
        if data.lstrip()[:1] == b"[":  # a JSON array, not JSON lines
            try:
                rows = parse_json(data, f"corpus file {str(file)!r}")
            except UnicodeDecodeError as e:
                raise ValueError(f"corpus file {str(file)!r} is not valid JSON ({e})") from e
            yield from rows if isinstance(rows, list) else [rows]
            continue
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                yield parse_json(line, "row")
            except (ValueError, UnicodeDecodeError):
                yield _BadRow()


def load_hub(
    path: str = NEMOTRON_ID,
    name: str | None = "4plus",
    *,
    split: str = "train",
    filt: CorpusFilter | None = None,
    max_documents: int | None = 10_000,
    **load_kwargs: Any,
) -> list[Document]:
    """Stream documents from a hub data set (default: Nemotron-CC-Math-v1, config ``4plus``).

    ``path`` may also be a local folder laid out like a hub repository (with ``configs`` in its
    README), which is how the tests exercise this code path offline.
    """
    if path == NEMOTRON_ID and name not in NEMOTRON_CONFIGS:
        raise ValueError(f"Nemotron-CC-Math-v1 config must be one of {NEMOTRON_CONFIGS}, got {name!r}")
    source = f"{path}" + (f":{name}" if name else "")
    if path != NEMOTRON_ID:
        stream = _datasets().load_dataset(path, name, split=split, streaming=True, **load_kwargs)
        return documents_from_rows(stream, filt, max_documents=max_documents, source=source)[0]
    if not _hub_token():  # gated: without a token the hub answers 401 after a slow round trip
        raise ValueError(_nemotron_access_error("no Hugging Face token found"))
    try:
        stream = _datasets().load_dataset(path, name, split=split, streaming=True, **load_kwargs)
        return documents_from_rows(stream, filt, max_documents=max_documents, source=source)[0]
    except Exception as e:  # gated (401/403), offline, hub down: one line that says what to do
        first_line = str(e).splitlines()[0] if str(e) else ""
        raise ValueError(_nemotron_access_error(f"{type(e).__name__}: {first_line}")) from e


def _hub_token() -> str | None:
    """The Hugging Face token ``datasets`` would use (``HF_TOKEN`` or a saved login), without network."""
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"]
    try:
        from huggingface_hub import get_token
    except ImportError:  # pragma: no cover - a dependency of datasets
        return None
    return get_token()


def _nemotron_access_error(reason: str) -> str:
    return (
        f"cannot stream {NEMOTRON_ID} ({reason}). It is gated: accept its terms at "
        f"https://huggingface.co/datasets/{NEMOTRON_ID}, then `export HF_TOKEN=hf_...` (or `hf auth login`); "
        "or train on other documents with `--set game.corpus=embedded` or `--set game.corpus=PATH` "
        "(a .parquet/.jsonl file or folder with id, text, metadata)"
    )


# Named corpus sources beyond the built-in ones: ``name[:split]`` -> loader(name, filt, split=, max_documents=).
# spy_env.task_corpora registers govreport and writingprompts (it imports this module, not the reverse).
CORPUS_SOURCES: dict[str, Callable[..., list[Document]]] = {}


def register_corpus_source(name: str, loader: Callable[..., list[Document]]) -> None:
    """Make ``game.corpus="name[:split]"`` load through ``loader(name, filt, split=..., max_documents=...)``."""
    CORPUS_SOURCES[name] = loader


def load_corpus(
    source: str | Path | Sequence[Any] = "embedded",
    filt: CorpusFilter | None = None,
    *,
    max_documents: int | None = None,
) -> list[Document]:
    """Load a corpus from a spec (see the module docstring) or a sequence of rows/documents."""
    if isinstance(source, (list, tuple)):
        rows = [{"id": r.id, "text": r.text, "metadata": r.metadata} if isinstance(r, Document) else r for r in source]
        return documents_from_rows(rows, filt, max_documents=max_documents, source="given corpus")[0]
    if isinstance(source, Path):
        return load_local(source, filt, max_documents=max_documents)
    if not isinstance(source, str):
        raise ValueError(f"corpus must be a spec string, a path or a list of rows, got {type(source).__name__}")
    if source == "embedded":
        docs = load_embedded(filt)
        return docs[:max_documents] if max_documents else docs
    hub_limit = max_documents or 10_000
    if source == "nemotron" or source.startswith("nemotron:"):
        config = source.partition(":")[2] or "4plus"
        return load_hub(NEMOTRON_ID, config, filt=filt, max_documents=hub_limit)
    name, _, split = source.partition(":")
    if name in CORPUS_SOURCES:  # registered sources: the paper's other tasks' corpora (spy_env.task_corpora)
        return CORPUS_SOURCES[name](name, filt, split=split or "train", max_documents=hub_limit)
    if source.startswith("hf:"):
        hub_id, _, config = source[3:].partition(":")
        return load_hub(hub_id, config or None, filt=filt, max_documents=hub_limit)
    return load_local(source, filt, max_documents=max_documents)


class CorpusSettings(Protocol):
    """The fields of :class:`spy_env.config.GameConfig` that say which documents a game plays
    (declared here so the corpus does not import the config that imports it)."""

    corpus: Any
    max_document_chars: int
    max_documents: int | None


def game_documents(config: CorpusSettings) -> tuple[Document, ...]:
    """The documents ``config`` plays: its ``corpus`` as given when that already holds
    :class:`Document` s (loaded and filtered once, e.g. by a runner or a trainer), else loaded from
    its spec or rows with the config's filter. A spec string is loaded once per process."""
    corpus = config.corpus
    if isinstance(corpus, tuple) and all(isinstance(d, Document) for d in corpus):
        return corpus
    if isinstance(corpus, str):
        return _cached_corpus(corpus, config.max_document_chars, config.max_documents)
    filt = CorpusFilter(truncate=config.max_document_chars)
    return tuple(load_corpus(corpus, filt, max_documents=config.max_documents))


@functools.lru_cache(maxsize=8)
def _cached_corpus(source: str, max_document_chars: int, max_documents: int | None) -> tuple[Document, ...]:
    filt = CorpusFilter(truncate=max_document_chars)
    return tuple(load_corpus(source, filt, max_documents=max_documents))
