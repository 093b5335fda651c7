"""The paper's other source corpora: GovReport (summarisation) and WritingPrompts (creative writing).

Both stream from the hub through ``datasets.load_dataset`` (no token needed) and become
:class:`~spy_env.corpus.Document` rows through the same filters as every corpus
(:func:`~spy_env.corpus.documents_from_rows`). The hub ids are the canonical ones (the project's
dataset list names neither; chosen here):

- ``govreport`` → ``ccdv/govreport-summarization``, config ``document``: columns ``report`` (the
  source x) and ``summary`` (the reference summary, kept in ``metadata``); play it with
  ``--set game.corpus=govreport --set game.task=summary``.
- ``writingprompts`` → ``euclaise/writingprompts``: columns ``prompt`` (``[ WP ] ...``) and ``story``;
  the source x is the prompt and its story; play it with ``--set game.corpus=writingprompts
  --set game.task=writing``.

Neither has an id column, so a document's id is a hash of its text: stable across runs and
machines, which the held-out split (by id hash) needs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from spy_env.corpus import CorpusFilter, Document, documents_from_rows, register_corpus_source

__all__ = ["TASK_CORPORA", "TaskCorpus", "load_task_corpus"]


@dataclass(frozen=True)
class TaskCorpus:
    """A hub data set and how one of its rows becomes a document (``text`` and ``metadata``)."""

    name: str
    hub_id: str
    config: str | None
    task: str  # the spy_env task it is played with
    to_document: Callable[[Mapping[str, Any]], tuple[Any, dict[str, Any]]]


def _govreport(row: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    return row.get("report"), {"summary": row.get("summary")} if isinstance(row.get("summary"), str) else {}


def _writingprompts(row: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    prompt, story = row.get("prompt"), row.get("story")
    if not isinstance(prompt, str) or not isinstance(story, str):
        return None, {}
    return f"{prompt.strip()}\n\n{story.strip()}", {"prompt": prompt.strip()}


TASK_CORPORA: dict[str, TaskCorpus] = {
    "govreport": TaskCorpus("govreport", "ccdv/govreport-summarization", "document", "summary", _govreport),
    "writingprompts": TaskCorpus("writingprompts", "euclaise/writingprompts", None, "writing", _writingprompts),
}


def _rows(corpus: TaskCorpus, stream: Iterable[Any]) -> Iterator[Any]:
    """Rows in the corpus schema (``id``, ``text``, ``metadata``); a row that is not a mapping passes through
    to be counted as broken."""
    for row in stream:
        if not isinstance(row, Mapping):
            yield row
            continue
        text, metadata = corpus.to_document(row)
        digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest() if isinstance(text, str) else "none"
        yield {"id": f"{corpus.name}-{digest}", "text": text, "metadata": metadata}


def load_task_corpus(
    name: str,
    filt: CorpusFilter | None = None,
    *,
    split: str = "train",
    max_documents: int | None = 10_000,
    path: str | None = None,
) -> list[Document]:
    """The first ``max_documents`` usable documents of ``name`` (``govreport`` or ``writingprompts``),
    streamed; ``path`` replaces the hub id (a local folder laid out like the hub repository)."""
    if name not in TASK_CORPORA:
        raise ValueError(f"unknown task corpus {name!r}; known: {sorted(TASK_CORPORA)}")
    corpus = TASK_CORPORA[name]
    import datasets

    stream = datasets.load_dataset(path or corpus.hub_id, corpus.config, split=split, streaming=True)
    return documents_from_rows(_rows(corpus, stream), filt, max_documents=max_documents, source=corpus.hub_id)[0]


for _name in TASK_CORPORA:
    register_corpus_source(_name, load_task_corpus)
