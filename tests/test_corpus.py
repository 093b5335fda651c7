"""Corpus: the embedded documents, datasets-backed loaders in the real schema, filters."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spy_env.corpus import (
    NEMOTRON_ID,
    CorpusFilter,
    documents_from_rows,
    load_corpus,
    load_embedded,
    load_hub,
    load_local,
)

METADATA_FIELDS = {
    "warc_filename",
    "warc_id",
    "finemath_int_scores",
    "finemath_scores",
    "nemocurator_int_scores",
    "nemocurator_scores",
    "category",
    "models_used",
}


def test_embedded_corpus_meets_the_spec():
    docs = load_embedded()
    assert len(docs) >= 80
    assert len({d.id for d in docs}) == len(docs)
    topics = Counter(d.metadata["category"] for d in docs)
    assert len(topics) >= 10
    for d in docs:
        words = len(d.text.split())
        assert 150 <= words <= 600, (d.id, words)
        assert "$" in d.text
        assert set(d.metadata) == METADATA_FIELDS


def nemotron_rows(n=6):
    docs = load_embedded()[:n]
    return [
        {
            "id": d.id,
            "text": d.text,
            "metadata": {
                "warc_filename": "crawl/segment.warc.gz",
                "warc_id": f"<urn:uuid:{i}>",
                "finemath_int_scores": 4,
                "finemath_scores": 4.2,
                "nemocurator_int_scores": 4,
                "nemocurator_scores": 4.1,
                "category": "math",
                "models_used": "model-a",
            },
        }
        for i, d in enumerate(docs)
    ]


def test_local_parquet_and_jsonl(tmp_path):
    rows = nemotron_rows()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "shard.parquet")
    with open(tmp_path / "rows.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    from_parquet = load_local(tmp_path / "shard.parquet")
    from_jsonl = load_corpus(str(tmp_path / "rows.jsonl"))
    assert [d.id for d in from_parquet] == [r["id"] for r in rows]
    assert [d.text for d in from_jsonl] == [d.text for d in from_parquet]
    assert from_parquet[0].metadata["finemath_scores"] == pytest.approx(4.2)
    with pytest.raises(ValueError, match="one kind"):
        load_local(tmp_path)  # a folder mixing parquet and jsonl


def test_hub_loader_on_a_local_repository_layout(tmp_path):
    """The hub code path (load_dataset(path, config, streaming=True)) on a hub-shaped folder."""
    rows = nemotron_rows()
    for config, part in (("4plus", rows[:4]), ("3", rows[4:])):
        (tmp_path / config).mkdir()
        pq.write_table(pa.Table.from_pylist(part), tmp_path / config / "train-00000.parquet")
    (tmp_path / "README.md").write_text(
        "---\nconfigs:\n"
        "- config_name: 4plus\n  data_files:\n  - split: train\n    path: 4plus/*.parquet\n"
        "- config_name: '3'\n  data_files:\n  - split: train\n    path: 3/*.parquet\n---\n"
    )
    docs = load_hub(str(tmp_path), "4plus", max_documents=3)
    assert [d.id for d in docs] == [r["id"] for r in rows[:3]]
    assert [d.id for d in load_hub(str(tmp_path), "3")] == [r["id"] for r in rows[4:]]
    with pytest.raises(ValueError, match="config"):
        load_hub(NEMOTRON_ID, "3plus")


def test_broken_rows_are_skipped_and_counted():
    good = nemotron_rows(2)
    rows = [
        good[0],
        "not a row",
        {"id": "x"},
        {"id": "y", "text": 42},
        {"id": "z", "text": "   \n "},
        {"id": "short", "text": "too short"},
        dict(good[0], id="dup"),
        good[1],
    ]
    docs, stats = documents_from_rows(rows)
    assert [d.id for d in docs] == [good[0]["id"], good[1]["id"]]
    assert stats.skipped == {
        "not_a_row": 1,
        "no_text": 2,
        "empty": 1,
        "too_short": 1,
        "duplicate": 1,
    }
    with pytest.raises(ValueError, match="no usable document"):
        documents_from_rows([{"text": ""}, None])


def test_length_units_and_truncation():
    text = load_embedded()[0].text
    rows = [{"id": "a", "text": text}]
    cut = documents_from_rows(rows, CorpusFilter(truncate=500))[0][0]
    assert len(cut.text) <= 500 and text.startswith(cut.text)
    assert cut.text.rstrip()[-1] in ".!?:$" or cut.text.endswith("\n") or len(cut.text) > 250
    words = documents_from_rows(rows, CorpusFilter(unit="words", truncate=60, min_length=10))[0][0]
    assert len(words.text.split()) <= 60
    toks = documents_from_rows(rows, CorpusFilter(unit="tokens", tokenizer=list, min_length=10, truncate=300))[0][0]
    assert len(toks.text) <= 300
    with pytest.raises(ValueError, match="max_length"):
        documents_from_rows(rows, CorpusFilter(max_length=50))
    with pytest.raises(ValueError, match="tokenizer"):
        CorpusFilter(unit="tokens")
    with pytest.raises(ValueError, match="unit"):
        CorpusFilter(unit="lines")


def test_env_on_a_local_corpus(tmp_path):
    import spy_env

    pq.write_table(pa.Table.from_pylist(nemotron_rows()), tmp_path / "c.parquet")
    env = spy_env.parallel_env(corpus=str(tmp_path / "c.parquet"), degrade="neighbor")
    env.reset(seed=0)
    assert env.game.document.id in {r["id"] for r in nemotron_rows()}
    assert env.game.views[env.game.spy_seat] != env.game.document.text
