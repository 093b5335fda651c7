"""Scoring completions against gold answers, the way the field does (math-verify, gold first).

Nothing a model writes is ever executed: answers are taken from the last ``\\boxed{}`` by a
brace matcher and parsed by math-verify's LaTeX grammar only (never ``sympify``/``parse_expr``,
which evaluate strings). math-verify's own timeouts use SIGALRM, which only works in the main
thread; elsewhere its timeouts are switched off and each answer is checked in a worker process
that is killed when it overruns (:class:`Scorer`).
"""

from __future__ import annotations

import concurrent.futures as futures
import re
import threading

from spy_env.parsing import last_boxed, strip_think

__all__ = ["Scorer", "extract_answer", "math_equal", "mc_letter", "normalize"]

_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?:\D|$))")


def extract_answer(completion: str) -> str | None:
    """The final answer of a completion: the last ``\\boxed{}`` after ``<think>`` is dropped."""
    return last_boxed(strip_think(completion))


def normalize(answer: str) -> str:
    """Cosmetic normalisation before parsing: thousands separators, degrees, percent signs,
    ``\\text{}`` wrappers, ``\\$``, ``\\left``/``\\right`` and ``\\dfrac``.

    >>> normalize("1,000")
    '1000'
    >>> normalize("45^{\\\\circ}"), normalize("12\\\\%"), normalize("\\\\$5")
    ('45', '12', '5')
    """
    a = answer.strip()
    a = _TEXT.sub(r"\1", a)
    a = re.sub(r"\^\s*\{?\\circ\}?|°", "", a)
    a = a.replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    a = a.replace("\\left", "").replace("\\right", "").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    a = _THOUSANDS.sub("", a)
    return a.strip().rstrip(".")


def _verify(gold: str, answer: str, timeout: int | None) -> bool:
    from math_verify import LatexExtractionConfig, parse, verify

    config = [LatexExtractionConfig()]
    g = parse(f"${normalize(gold)}$", extraction_config=config, parsing_timeout=timeout)
    p = parse(f"${normalize(answer)}$", extraction_config=config, parsing_timeout=timeout)
    if not g or not p:
        return normalize(gold) == normalize(answer)
    return bool(verify(g, p, timeout_seconds=timeout))


def math_equal(gold: str, answer: str | None, timeout: int = 5) -> bool:
    """Whether ``answer`` equals ``gold`` mathematically (main thread: math-verify's timeouts)."""
    if answer is None:
        return False
    if normalize(gold) == normalize(answer):
        return True
    in_main = threading.current_thread() is threading.main_thread()
    return _verify(gold, answer, timeout if in_main else None)


_LETTER = re.compile(r"^\(?([A-P])\)?(?:[.:)\s]|$)")
_ANSWER_IS = re.compile(r"answer is:?\s*\(?([A-P])\)?\b", re.IGNORECASE)


def mc_letter(completion: str) -> str | None:
    """The chosen option letter: from the last ``\\boxed{}``, else 'the answer is (X)'."""
    boxed = extract_answer(completion)
    if boxed is not None:
        m = _LETTER.match(normalize(boxed).replace("\\text", "").strip("{} "))
        if m:
            return m.group(1)
    matches = _ANSWER_IS.findall(strip_think(completion))
    return matches[-1] if matches else None


class Scorer:
    """Scores (gold, completion, kind) triples; outside the main thread, in a killable worker."""

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self._pool: futures.ProcessPoolExecutor | None = None

    def score(self, gold: str, completion: str, kind: str) -> bool:
        if kind == "mc":
            return mc_letter(completion) == gold.strip().upper()
        answer = extract_answer(completion)
        if answer is None:
            return False
        if threading.current_thread() is threading.main_thread():
            return math_equal(gold, answer, timeout=int(self.timeout))
        if self._pool is None:
            self._pool = futures.ProcessPoolExecutor(max_workers=1)
        future = self._pool.submit(math_equal, gold, answer, int(self.timeout))
        try:
            return future.result(timeout=self.timeout + 5)
        except futures.TimeoutError:
            self.close()  # the worker is stuck in a pathological parse: kill it, count a miss
            return False

    def close(self) -> None:
        if self._pool is not None:
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.kill()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
