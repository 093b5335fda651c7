"""Degradation operators: ratio, placeholders, task-relevant spans first, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from spy_env.corpus import load_embedded
from spy_env.degrade import DEGRADERS, DegradeContext, Degraded, sentence_spans

DOCS = load_embedded()


def run(name, text, seed=0, **ctx):
    return DEGRADERS[name](text, np.random.default_rng(seed), DegradeContext(**ctx))


@pytest.mark.parametrize("ratio", [0.2, 0.4, 0.6])
def test_mask_spans_removes_about_ratio(ratio):
    shares = []
    for doc in DOCS:
        out = run("mask_spans", doc.text, ratio=ratio)
        removed = sum(s.end - s.start for s in out.spans)
        total = sum(b - a for a, b in sentence_spans(doc.text))
        shares.append(removed / total)
        assert out.text.count("[…]") == len(out.spans)
        for span in out.spans:  # offsets point into the original
            assert doc.text[span.start : span.end] == span.original
    assert abs(np.mean(shares) - ratio) < 0.06
    assert min(shares) > 0


def test_mask_spans_prefers_task_relevant_sentences():
    relevant_share = []
    for doc in DOCS[:40]:
        out = run("mask_spans", doc.text, ratio=0.2)
        relevant = [any(c.isdigit() or c in "$\\" for c in s.original) for s in out.spans]
        relevant_share.append(np.mean(relevant))
        plain = run("mask_spans", doc.text, ratio=0.2, relevant_first=False)
        assert plain.spans  # the option works too
    assert np.mean(relevant_share) > 0.95


def test_silent_placeholder_and_shape():
    text = DOCS[0].text
    out = run("mask_spans", text, placeholder="")
    assert "[…]" not in out.text and len(out.text) < len(text)
    assert out.text.count("\n") > text.count("\n") // 2  # overall shape (line structure) kept


def test_drop_sentences_and_perturb_numbers():
    text = DOCS[3].text
    dropped = run("drop_sentences", text, ratio=0.3)
    n = len(sentence_spans(text))
    assert len(dropped.text) < len(text) and "[…]" not in dropped.text
    assert 1 <= len(dropped.spans) <= n
    perturbed = run("perturb_numbers", text, ratio=0.5)
    assert perturbed.spans and len(perturbed.text.split()) == len(text.split())
    for span in perturbed.spans:
        assert span.original != span.replacement
        assert len(span.original) == len(span.replacement) or "." in span.original


def test_neighbor_and_blank():
    texts = [d.text for d in DOCS]
    out = run("neighbor", texts[0], neighbor=lambda: texts[5])
    assert out.text == texts[5]
    assert run("blank", texts[0]).text == ""
    with pytest.raises(ValueError):
        run("neighbor", texts[0])


@pytest.mark.parametrize("name", sorted(DEGRADERS))
def test_deterministic_given_seed(name):
    text = DOCS[11].text
    ctx = {"neighbor": lambda: DOCS[12].text}
    assert run(name, text, 7, **ctx) == run(name, text, 7, **ctx)
    if name in ("mask_spans", "drop_sentences", "perturb_numbers"):
        assert any(run(name, text, s, **ctx) != run(name, text, 7, **ctx) for s in range(8))


@pytest.mark.parametrize("name", sorted(DEGRADERS))
@pytest.mark.parametrize("text", ["", "x", "no numbers at all here", "1.", "$$", "\n\n\n"])
def test_degenerate_texts(name, text):
    out = run(name, text, neighbor=lambda: "other")
    assert isinstance(out.text, str)


def test_an_operator_name_registered_twice_is_an_error():
    from spy_env.degrade import register_degrader

    with pytest.raises(ValueError, match="'blank' is already registered"):
        register_degrader("blank")(lambda text, rng, ctx: Degraded("", (), "blank"))
    assert DEGRADERS["blank"].fn.__name__ == "blank"  # the built-in stays


def test_what_an_operator_needs_is_its_registered_capability_not_its_name():
    """A plugin operator that reads another document gets the two-document check 'neighbor' gets."""
    from spy_env.config import GameConfig
    from spy_env.degrade import needs_neighbors, register_degrader

    register_degrader("swap_other", needs_neighbors=True)(lambda text, rng, ctx: Degraded(ctx.neighbor(), (), "x"))
    try:
        assert needs_neighbors("swap_other") and needs_neighbors("neighbor") and not needs_neighbors("mask_spans")
        one = [{"id": "a", "text": "One document, 12 apples."}]
        with pytest.raises(ValueError, match="at least 2 documents for degrade='swap_other'"):
            GameConfig(corpus=one, degrade="swap_other")
        GameConfig(corpus=one, degrade="mask_spans")  # an operator that reads only its own document
    finally:
        del DEGRADERS["swap_other"]


def test_a_bare_function_put_in_the_registry_by_hand_still_plays(monkeypatch):
    """DEGRADERS[name] = fn (the registry's old form, still used by tests and plugins) reads no neighbour."""
    from spy_env.config import GameConfig
    from spy_env.degrade import needs_neighbors

    monkeypatch.setitem(DEGRADERS, "bare", lambda text, rng, ctx: Degraded(text.upper(), (), "bare"))
    assert not needs_neighbors("bare")
    GameConfig(corpus=[{"id": "a", "text": "One document, 12 apples."}], degrade="bare")
