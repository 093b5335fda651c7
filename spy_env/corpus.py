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

Local files are read by :func:`read_rows` as they come: what is not a regular file (a FIFO,
``/dev/zero``) is refused before it is read, a JSON line longer than :data:`MAX_ROW_BYTES` is an
error found after reading that much of it, parquet is read a batch at a time, and
``max_documents`` stops the reading once enough documents are kept: a corpus of many gigabytes
costs what its first documents cost. A ``.json`` file holding one array is parsed whole (the
standard library has no streaming JSON parser), so it may hold :data:`MAX_JSON_ARRAY_BYTES`;
larger corpora are JSON lines.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO, Literal, Protocol

from spy_env.degrade import sentence_spans
from spy_env.io import open_regular, parse_json, read_lines
from spy_env.parsing import clean_text

logger = logging.getLogger(__name__)

__all__ = [
    "DOCUMENT_SPLITS",
    "HELDOUT_FRACTION",
    "MAX_JSON_ARRAY_BYTES",
    "MAX_ROW_BYTES",
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
    "read_rows",
    "split_documents",
]

NEMOTRON_ID = "nvidia/Nemotron-CC-Math-v1"
NEMOTRON_CONFIGS = ("3", "4plus", "4plus_MIND")

# Bytes one JSON line (one row: a document, a question) may hold. Nemotron-CC-Math documents are at
# most a few hundred kilobytes; a longer line is refused after this much of it is read (a file of NUL
# bytes with no line end, a sparse file of many gigabytes).
MAX_ROW_BYTES = 16 << 20
# Bytes of a ``.json`` file holding one array, parsed whole (about five times its size in memory).
MAX_JSON_ARRAY_BYTES = 64 << 20
# Suffixes of the local files rows are read from, and the reader of each.
ROW_FILE_KINDS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}
# The columns of Nemotron-CC-Math-v1's schema a document is made of (other parquet columns are not read).
DOCUMENT_COLUMNS = frozenset({"id", "text", "metadata"})


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

    ``rows`` is read no further than the row that gives the ``max_documents``-th document.
    A row is skipped (and counted) when it is a JSON line that does not parse (``bad_json``: the
    ``ValueError`` :func:`read_rows` yields for it), not
    a mapping (``not_a_row``), its ``text`` is
    missing or not a string (``no_text``), blank (``empty``), outside the length bounds
    (``too_short``/``too_long``) or a duplicate (``duplicate``).
    """
    if max_documents is not None and max_documents < 1:
        raise ValueError(f"max_documents must be None or >= 1, got {max_documents!r}")
    filt = filt or CorpusFilter()
    stats = CorpusStats()
    seen: set[bytes] = set()
    docs: list[Document] = []
    for i, row in enumerate(rows):
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
        if max_documents is not None and len(docs) >= max_documents:
            break  # before the next row: a streamed source reads no further than the documents it gives
    stats.kept = len(docs)
    if not docs:
        raise ValueError(f"{source} has no usable document ({stats})")
    if stats.skipped:  # broken rows deserve a word; filtered ones (length, duplicates) are routine
        broken = {"bad_json", "not_a_row", "no_text"} & set(stats.skipped)
        logger.log(logging.WARNING if broken else logging.INFO, "%s: %s", source, stats)
    return docs, stats


def _usable_text(row: Any, filt: CorpusFilter, seen: set[bytes]) -> tuple[str | None, str]:
    """A row's cleaned text, or None and why the row is skipped (``seen``: dedup keys so far)."""
    if isinstance(row, ValueError):  # a JSON line that does not parse (read_rows)
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

    Files are read by :func:`read_rows`, in name order, and no further than the row that gives the
    ``max_documents``-th document. A malformed JSON line is skipped and counted (``bad_json``)
    instead of failing the file. An empty file is an error.
    """
    path = Path(path)
    if not path.exists():
        raise ValueError(f"corpus path {str(path)!r} does not exist")
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    kinds = {ROW_FILE_KINDS[p.suffix.lower()] for p in files if p.suffix.lower() in ROW_FILE_KINDS}
    if len(kinds) != 1:
        raise ValueError(
            f"corpus path {str(path)!r} must hold .parquet, .jsonl/.json or .csv files of one kind, "
            f"found {sorted(kinds) or 'none'}"
        )
    data_files = [p for p in files if p.suffix.lower() in ROW_FILE_KINDS]
    rows = (row for file in data_files for _, row in read_rows(file, "corpus file", columns=DOCUMENT_COLUMNS))
    try:
        return documents_from_rows(rows, filt, max_documents=max_documents, source=str(path))[0]
    finally:
        rows.close()  # the file a max_documents stop left open


def read_rows(
    path: str | os.PathLike, what: str, *, columns: Collection[str] | None = None
) -> Iterator[tuple[str, Any]]:
    """``(where, row)`` for each row of a local ``.jsonl``/``.json``/``.parquet``/``.csv`` file, as it is read.

    ``where`` names the file and the row (``corpus file 'c.jsonl' line 3``) for messages. A JSON line
    that does not parse (malformed, not UTF-8, nested deeper than :data:`spy_env.io.MAX_DEPTH`) comes
    as the ``ValueError`` that says so, for the caller to skip or raise. Everything else is a
    ``ValueError`` naming the file, raised before the file is read when it is not a regular file (a
    FIFO, a device, a folder). A ``.json`` file that holds one array is parsed whole, up to
    :data:`MAX_JSON_ARRAY_BYTES`. Of a parquet file only the ``columns`` it has are read (all when
    ``None``), a batch of rows at a time. A caller that stops early reads no further.
    """
    kind = ROW_FILE_KINDS.get(Path(path).suffix.lower())
    if kind is None:
        raise ValueError(f"{what} {str(path)!r} is not a .jsonl, .json, .parquet or .csv file")
    if kind == "parquet":
        yield from _parquet_rows(path, what, columns)
    elif kind == "csv":
        yield from _csv_rows(path, what)
    else:
        yield from _json_rows(path, what)


def _csv_rows(path: str | os.PathLike, what: str) -> Iterator[tuple[str, Any]]:
    """Rows of a CSV file with a header line (GPQA's hub files), as they are read; a field is bounded
    by the ``csv`` module's limit (131,072 characters), and what it cannot read is a ``ValueError``
    naming the file and the line."""
    import csv
    import io

    name = f"{what} {str(path)!r}"
    with open_regular(path, what) as f:
        reader = csv.DictReader(io.TextIOWrapper(f, encoding="utf-8", newline=""), strict=True)
        try:
            for row in reader:
                if None in row or None in row.values():  # more or fewer fields than the header names
                    raise csv.Error(f"{len(reader.fieldnames or ())} columns in the header, not in this row")
                yield f"{name} line {reader.line_num}", row
        except (csv.Error, UnicodeDecodeError) as e:
            raise ValueError(f"{name} line {reader.line_num} is not CSV ({e})") from e
        if reader.line_num == 0:
            raise ValueError(f"{name} is empty")


def _json_rows(path: str | os.PathLike, what: str) -> Iterator[tuple[str, Any]]:
    name = f"{what} {str(path)!r}"
    with open_regular(path, what) as f:
        array = _starts_with(f, b"[")
        data = f.read(MAX_JSON_ARRAY_BYTES + 1) if array else b""
    if array:  # a JSON array, not JSON lines
        if len(data) > MAX_JSON_ARRAY_BYTES:
            raise ValueError(
                f"{name} is a JSON array larger than {MAX_JSON_ARRAY_BYTES:,} bytes, which is parsed whole; "
                "write larger files as JSON lines (.jsonl), which are read as they come"
            )
        rows = parse_json(data, name)  # a list: the text starts with "["
        del data
        for number, row in enumerate(rows, start=1):
            yield f"{name} item {number}", row
        return
    empty = True
    for number, line in read_lines(path, what, max_line_bytes=MAX_ROW_BYTES):
        empty, where = False, f"{name} line {number}"
        try:
            row = parse_json(line, where)
        except ValueError as e:  # UnicodeDecodeError included
            row = e
        yield where, row
    if empty:
        raise ValueError(f"{name} is empty")


def _starts_with(f: BinaryIO, prefix: bytes) -> bool:
    """Whether the text of the binary file ``f`` starts with ``prefix`` after white space (looked for in
    the first :data:`MAX_ROW_BYTES`); ``f`` is left at its start."""
    seen = 0
    while seen <= MAX_ROW_BYTES and (chunk := f.read(1 << 16)):
        seen += len(chunk)
        if chunk.strip():
            f.seek(0)
            return chunk.lstrip().startswith(prefix)
    f.seek(0)
    return False


def _parquet_rows(path: str | os.PathLike, what: str, columns: Collection[str] | None) -> Iterator[tuple[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = f"{what} {str(path)!r}"
    with open_regular(path, what) as f:
        number = 0
        try:
            parquet = pq.ParquetFile(f)
            names = parquet.schema_arrow.names
            wanted = names if columns is None else [c for c in names if c in columns]
            for batch in parquet.iter_batches(batch_size=64, columns=wanted):
                for row in batch.to_pylist():
                    number += 1
                    yield f"{name} row {number}", row
        except (pa.ArrowException, OSError) as e:  # a corrupt or truncated file, whatever pyarrow raised
            raise ValueError(f"{name} cannot be read as parquet ({type(e).__name__}: {e})") from e


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
    corpus = config.source.corpus
    if isinstance(corpus, tuple) and all(isinstance(d, Document) for d in corpus):
        return corpus
    if isinstance(corpus, str):
        return _cached_corpus(corpus, config.limits.max_document_chars, config.source.max_documents)
    filt = CorpusFilter(truncate=config.limits.max_document_chars)
    return tuple(load_corpus(corpus, filt, max_documents=config.source.max_documents))


@functools.lru_cache(maxsize=8)
def _cached_corpus(source: str, max_document_chars: int, max_documents: int | None) -> tuple[Document, ...]:
    filt = CorpusFilter(truncate=max_document_chars)
    return tuple(load_corpus(source, filt, max_documents=max_documents))
