"""GovReport and WritingPrompts loaders (issue #20): the hub code path on local folders in the real schema."""

from __future__ import annotations

import dataclasses

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from spy_env import task_corpora  # noqa: E402
from spy_env.corpus import load_corpus, load_embedded, split_documents  # noqa: E402
from spy_env.task_corpora import TASK_CORPORA, load_task_corpus  # noqa: E402


def hub_folder(tmp_path, config_dir, rows, config_name):
    """A folder laid out like the hub repository (README configs + parquet shards)."""
    (tmp_path / config_dir).mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / config_dir / "train-00000-of-00001.parquet")
    (tmp_path / "README.md").write_text(
        f"---\nconfigs:\n- config_name: {config_name}\n  data_files:\n  - split: train\n"
        f"    path: {config_dir}/train-*.parquet\n---\n"
    )
    return str(tmp_path)


def test_govreport_rows_become_documents_with_their_reference_summary(tmp_path):
    texts = [d.text for d in load_embedded()[:4]]
    rows = [{"report": t, "summary": f"summary {i}"} for i, t in enumerate(texts)]
    rows.append({"report": "too short", "summary": "x"})  # filtered like any corpus row
    path = hub_folder(tmp_path, "document", rows, "document")
    docs = load_task_corpus("govreport", path=path)
    assert [d.text for d in docs] == texts
    assert [d.metadata["summary"] for d in docs] == [f"summary {i}" for i in range(4)]
    assert len({d.id for d in docs}) == 4 and all(d.id.startswith("govreport-") for d in docs)
    assert [d.id for d in load_task_corpus("govreport", path=path, max_documents=2)] == [d.id for d in docs[:2]]
    assert TASK_CORPORA["govreport"].hub_id == "ccdv/govreport-summarization"
    assert TASK_CORPORA["govreport"].task == "summary"


def test_writingprompts_rows_join_prompt_and_story(tmp_path, monkeypatch):
    stories = [d.text for d in load_embedded()[4:9]]
    rows = [{"prompt": f"[ WP ] Prompt {i}. ", "story": s} for i, s in enumerate(stories)]
    rows.append({"prompt": "[ WP ] No story", "story": None})  # skipped: no text
    path = hub_folder(tmp_path, "data", rows, "default")
    monkeypatch.setitem(
        TASK_CORPORA, "writingprompts", dataclasses.replace(TASK_CORPORA["writingprompts"], hub_id=path)
    )
    docs = load_corpus("writingprompts")  # the spec the game config takes
    assert [d.text for d in docs] == [f"[ WP ] Prompt {i}.\n\n{s}" for i, s in enumerate(stories)]
    assert docs[0].metadata == {"prompt": "[ WP ] Prompt 0."}
    again = load_corpus("writingprompts")
    assert [d.id for d in again] == [d.id for d in docs]  # ids from the text: a stable held-out split
    train, heldout = split_documents(docs, 0.5)
    assert sorted(d.id for d in train + heldout) == sorted(d.id for d in docs)
    assert TASK_CORPORA["writingprompts"].task == "writing"
    with pytest.raises(ValueError, match="unknown task corpus"):
        task_corpora.load_task_corpus("poems")
