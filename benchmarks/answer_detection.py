"""Boxed-answer detection over a long performance: every token vs incrementally.

``answer="boxed"`` lets a performance stop only once its text holds a complete ``\\boxed{…}``.
The check used to decode the whole body and search it after every token (quadratic in the
body's length); :class:`agents.decoding.AnswerProgram` now decodes again only when a token
brings a closing brace and no answer is complete yet. Both paths feed the same tokens (embedded
corpus text with LaTeX, ``--tokens`` long, the answer at the very end) through an
``AnswerProgram`` with the same tokenizer (SmolLM2's when installed, else the tiny test
tokenizer), check they agree at every token, and print the time of each and their ratio.

    python benchmarks/answer_detection.py                  # a 4,096-token body
    python benchmarks/answer_detection.py --tokens 1024
    python benchmarks/answer_detection.py --smoke    # a 256-token body: checks the path, not the speed
"""

from __future__ import annotations

import argparse
import tempfile
import time

from agents.decoding import AnswerProgram
from spy_env.corpus import load_embedded
from spy_env.parsing import last_boxed


class EveryToken(AnswerProgram):
    """The previous check: decode the whole body and search it after every token."""

    def _may_complete_answer(self, token: int) -> bool:
        return True


def tokenizer():
    from transformers import AutoTokenizer

    from agents import smollm2

    if smollm2.is_available():
        return "SmolLM2", AutoTokenizer.from_pretrained(str(smollm2.converted_path()))
    from agents.tiny import build_tiny_model

    return "tiny", AutoTokenizer.from_pretrained(str(build_tiny_model(tempfile.mkdtemp())))


def body(tok, n: int) -> list[int]:
    """``n`` tokens of corpus text sprinkled with LaTeX braces, ending in a boxed answer."""
    text = " ".join(f"{d.text} $\\frac{{{i}}}{{2}}$" for i, d in enumerate(load_embedded()))
    ids = tok.encode(text, add_special_tokens=False)
    end = tok.encode(" so \\boxed{42}", add_special_tokens=False)
    while len(ids) < n:
        ids = ids + ids
    return ids[: n - len(end)] + end


def run(cls, tok, ids: list[int]) -> tuple[float, list[bool]]:
    program = cls(
        len(ids) + 1,
        [1],
        [2],
        eos=-1,
        decode=lambda t: tok.decode(t, skip_special_tokens=True),
        has_answer=lambda s: last_boxed(s) is not None,
    )
    seen = []
    start = time.perf_counter()
    for token in ids:
        program.advance(token)
        seen.append(program._complete)
    return time.perf_counter() - start, seen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--smoke", action="store_true", help="a 256-token body")
    args = parser.parse_args(argv)
    if args.smoke:
        args.tokens = 256
    name, tok = tokenizer()
    ids = body(tok, args.tokens)
    old, old_seen = run(EveryToken, tok, ids)
    new, new_seen = run(AnswerProgram, tok, ids)
    assert old_seen == new_seen, "the two checks disagree"
    assert new_seen[-1] and not new_seen[-2], "the answer completes at the last token"
    print(f"{len(ids)}-token body, {name} tokenizer")
    print(f"every token: {old:.3f} s   incremental: {new:.4f} s   ratio {old / new:.0f}x")


if __name__ == "__main__":
    main()
