"""How an LLM's reply is shaped while it is decoded: vote modes and forced answer suffixes.

A small model rarely writes ``<vote>k</vote>`` or a ``\\boxed{}`` answer on its own (SmolLM2-135M
did neither in 98% of its votes), so it plays a game in which nothing happens. These *decoding
programs* let any model take part while keeping every decision its own:

- ``vote_mode="free"``: the reply is sampled as is (the game parses it);
- ``vote_mode="constrained"``: the reply is ``<vote>k</vote>``; only ``k`` is chosen by the model,
  among the legal seats;
- ``vote_mode="think-then-vote"``: the model reasons freely for up to ``think_tokens`` tokens
  (end-of-sequence is not allowed while it thinks; writing ``<vote>`` itself ends the thinking),
  then ``<vote>k</vote>`` is forced with ``k`` chosen by the model among the legal seats (and
  ``N/A`` when ``abstain``, which the game allows);
- ``answer="boxed"`` for performances: the model writes freely; it may stop once its text has a
  complete ``\\boxed{…}``. Otherwise, when the budget runs out, ``\\n\\n\\boxed{`` is forced and the
  model writes the answer (up to ``answer_tokens`` tokens, closed by its own ``}`` or a forced one).

Every generated token is either *sampled* by the model (free text, or a choice among several
allowed tokens) or *forced* (a single allowed token). :attr:`DecodeProgram.scored` marks the
sampled ones: those are the model's decisions, the only tokens a policy gradient should score.
Forced tokens keep their log-probabilities for the record but carry no decision.

Each vote mode and answer mode is a registered object (:data:`VOTE_MODES`, :data:`ANSWER_MODES`,
:class:`agents.registry.Registry`) that says what it does (a choice to score, reasoning first, ``N/A``
allowed, a forced answer); backends and the trainer ask it and never compare its name. The options
are one record, :class:`DecodingOptions`, whatever the backend. The programs work on
token ids and are backend-independent; :class:`ProgramsProcessor` runs them inside ``generate`` as
a logits processor (:class:`agents.hf.HFPolicy` uses it). vLLM has no per-token hook, so its backends send the same constraints as
structured-output patterns (:func:`vote_regex`, :func:`boxed_body_regex`,
:func:`boxed_answer_regex`): reasoning budgets there are counted in characters
(:data:`CHARS_PER_TOKEN` per token), and nested braces in an answer go one level deep.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.registry import Registry
from spy_env.sections import shown
from spy_env.stage import Stage

__all__ = [
    "ANSWER_MODES",
    "CHARS_PER_TOKEN",
    "VOTE_MODES",
    "AnswerMode",
    "AnswerProgram",
    "DecodeProgram",
    "DecodingOptions",
    "ProgramsProcessor",
    "VoteMode",
    "VoteProgram",
    "boxed_answer_regex",
    "boxed_body_regex",
    "is_vote",
    "vote_choices",
    "vote_regex",
]

CHARS_PER_TOKEN = 4  # structured outputs count characters, not tokens: a token's worth of text


@dataclass(frozen=True)
class VoteMode:
    """A ``vote_mode``: how a vote's reply is decoded, and what the backends and the trainer may expect of it.

    ``scores_choices``: the reply ends in a forced ``<vote>k</vote>`` whose ``k`` the model picks among
    the legal seats, so the vote has a choice step with a distribution over the choices (a free vote
    has neither). ``uses_thinking``: free reasoning, up to ``think_tokens``, comes before the forced
    tag. ``allows_abstain``: with ``abstain`` the vote may be ``N/A``.
    """

    scores_choices: bool = False
    uses_thinking: bool = False
    allows_abstain: bool = True

    @property
    def one_forward_pass(self) -> bool:
        """Whether the reply is the forced tag around the choice alone, so that one forward pass over
        ``prompt + <vote>`` decides it (nothing is generated before the choice)."""
        return self.scores_choices and not self.uses_thinking


@dataclass(frozen=True)
class AnswerMode:
    """An ``answer``: how a performance ends.

    ``forces_answer``: a body that runs out of budget without a complete ``\\boxed{…}`` gets a forced
    ``\\boxed{`` and the model's answer (on vLLM a second, shaped request: one call's pattern cannot).
    """

    forces_answer: bool = False


VOTE_MODES: Registry[VoteMode] = Registry("vote_mode")
VOTE_MODES.register("free", VoteMode())  # sampled as is; the game parses it
VOTE_MODES.register("constrained", VoteMode(scores_choices=True, allows_abstain=False))  # the bare tag with a seat
VOTE_MODES.register("think-then-vote", VoteMode(scores_choices=True, uses_thinking=True))
ANSWER_MODES: Registry[AnswerMode] = Registry("answer")
ANSWER_MODES.register("free", AnswerMode())
ANSWER_MODES.register("boxed", AnswerMode(forces_answer=True))


@dataclass(frozen=True)
class DecodingOptions:
    """How an LLM's replies are shaped while decoded (see the module docstring), for any backend.

    ``vote_mode`` (a name in :data:`VOTE_MODES`), ``think_tokens`` (the reasoning budget of
    think-then-vote), ``abstain`` (forced votes may pick ``N/A``; never in ``constrained``; off by
    default: a forced vote names a seat), ``answer`` (a name in :data:`ANSWER_MODES`) and
    ``answer_tokens`` (the length of a forced answer). Every backend and the trainer take this one
    record (the trainer's ``decoding`` section is this record with its sampling settings added);
    :attr:`vote` and :attr:`ending` are the registered modes the names choose, and
    :meth:`check_supported` refuses options an engine cannot honour.
    """

    vote_mode: str = field(
        default="free",
        metadata={
            "help": "How votes are decoded (local models): free; constrained (<vote>k</vote>, the model picks k: "
            "warm start); think-then-vote (free reasoning up to think_tokens, then a forced <vote>k</vote>). "
            "Forced tokens are recorded but never scored."
        },
    )
    think_tokens: int = field(default=32, metadata={"help": "Reasoning budget of think-then-vote votes, in tokens."})
    abstain: bool = field(
        default=False, metadata={"help": "Forced votes may also pick N/A (the game allows it); off: a seat is named."}
    )
    answer: str = field(
        default="free",
        metadata={
            "help": "How performances end (local models): free, or boxed (a \\boxed{} answer is forced when the "
            "budget runs out)."
        },
    )
    answer_tokens: int = field(
        default=12, metadata={"help": "Tokens the model may write inside a forced \\boxed{} answer."}
    )

    def __post_init__(self) -> None:
        """Refuse a name no mode is registered under, or a budget below 1 (errors name the field as
        ``<class>.<field>``)."""
        where = type(self).__name__
        for name, modes in (("vote_mode", VOTE_MODES), ("answer", ANSWER_MODES)):
            if getattr(self, name) not in modes:
                raise ValueError(f"{where}.{name} must be one of {tuple(modes)}, got {shown(getattr(self, name))}")
        for name in ("think_tokens", "answer_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{where}.{name} must be an integer >= 1, got {shown(value)}")

    @property
    def vote(self) -> VoteMode:
        """The registered :class:`VoteMode` of ``vote_mode``."""
        return VOTE_MODES[self.vote_mode]

    @property
    def ending(self) -> AnswerMode:
        """The registered :class:`AnswerMode` of ``answer``."""
        return ANSWER_MODES[self.answer]

    def check_supported(
        self, engine: str, *, vote_modes: Collection[str] = VOTE_MODES, answers: Collection[str] = ANSWER_MODES
    ) -> DecodingOptions:
        """These options, or a ``ValueError`` naming the field ``engine`` cannot honour.

        >>> DecodingOptions(answer="boxed").check_supported("vLLM training", answers=("free",))
        Traceback (most recent call last):
        ...
        ValueError: DecodingOptions.answer='boxed' is not supported by vLLM training (supported: 'free')
        """
        for name, supported in (("vote_mode", vote_modes), ("answer", answers)):
            value = getattr(self, name)
            if value not in supported:
                allowed = ", ".join(repr(s) for s in supported)
                raise ValueError(
                    f"DecodingOptions.{name}={value!r} is not supported by {engine} (supported: {allowed})"
                )
        return self

    @property
    def offers_abstain(self) -> bool:
        """Whether a forced vote may pick ``N/A`` (``constrained`` is the bare tag with a seat)."""
        return self.abstain and self.vote.allows_abstain

    def vote_pattern(self, observations: Sequence[Mapping[str, Any]]) -> str | None:
        """The structured-output regex of a batch of votes under these options (None: free).

        >>> DecodingOptions("think-then-vote", think_tokens=8, abstain=True).vote_pattern([{"stage": 1, "vote_targets": [1, 1]}])
        '[^<]{0,32}<vote>(?:1|2|N/A)</vote>'
        >>> DecodingOptions("constrained").vote_pattern([{"stage": 1, "vote_targets": [0, 1]}])
        '<vote>(?:2)</vote>'
        """
        if not self.vote.scores_choices:
            return None
        think = CHARS_PER_TOKEN * self.think_tokens if self.vote.uses_thinking else 0
        return vote_regex(observations, abstain=self.offers_abstain, think_chars=think)


def is_vote(observation: Mapping[str, Any]) -> bool:
    """Whether an observation asks for a vote (the detection stage) rather than a performance."""
    return Stage.of(observation.get("stage", Stage.PERFORM)) is Stage.VOTE


# a box's content: text without braces, or groups nested one level deep (\frac{1}{2})
_BOX_CONTENT = r"(?:[^{}]|\{[^{}]*\})"


def boxed_body_regex() -> str:
    r"""Free text that may only end once it holds a complete ``\boxed{…}`` (an ``answer="boxed"`` body).

    >>> import re
    >>> [bool(re.fullmatch(boxed_body_regex(), t)) for t in (r"so \boxed{\frac{1}{2}} done", "no answer yet")]
    [True, False]
    """
    return r"[\s\S]*\\boxed\{" + _BOX_CONTENT + r"+\}[\s\S]*"


def boxed_answer_regex(answer_chars: int) -> str:
    r"""The forced ending of a body that ran out: ``\n\n\boxed{``, up to ``answer_chars`` characters, ``}``.

    >>> import re
    >>> [bool(re.fullmatch(boxed_answer_regex(8), t)) for t in ("\n\n\\boxed{42}", "\n\n\\boxed{123456789}")]
    [True, False]
    """
    return r"\n\n\\boxed\{" + _BOX_CONTENT + f"{{1,{answer_chars}}}" + r"\}"


def vote_choices(observation: Mapping[str, Any], abstain: bool = False) -> list[str]:
    """The texts ``k`` may take in ``<vote>k</vote>``: the legal seats (1-based), then ``N/A``.

    >>> vote_choices({"stage": 1, "vote_targets": [True, False, True]}, abstain=True)
    ['1', '3', 'N/A']
    """
    targets = observation.get("vote_targets")
    seats = [str(i + 1) for i, ok in enumerate(() if targets is None else targets) if ok]
    return seats + (["N/A"] if abstain else [])


def vote_regex(observations: Sequence[Mapping[str, Any]], *, abstain: bool = False, think_chars: int = 0) -> str | None:
    """A structured-output regex for a whole batch of detection-stage observations, or None.

    One pattern serves the batch (a structured-output request carries one), so it allows the seats
    legal in *any* observation: a voter may still name a seat illegal for it (say, its own), which
    the game records as a violation. With ``think_chars`` the vote may follow up to that many
    characters of free reasoning (without ``<``, so the tag cannot be faked in it).

    >>> vote_regex([{"stage": 1, "vote_targets": [False, True, True]}, {"stage": 1, "vote_targets": [True, False, True]}])
    '<vote>(?:1|2|3)</vote>'
    >>> vote_regex([{"stage": 1, "vote_targets": [True, True]}], abstain=True, think_chars=200)
    '[^<]{0,200}<vote>(?:1|2|N/A)</vote>'
    >>> vote_regex([{"stage": 0, "vote_targets": [True, True]}]) is None
    True
    """
    import re

    if not observations or not all(is_vote(obs) for obs in observations):
        return None
    legal: set[int] = set()
    for obs in observations:
        legal |= {int(k) - 1 for k in vote_choices(obs)}
    if not legal:
        return None
    choices = [re.escape(str(s + 1)) for s in sorted(legal)] + (["N/A"] if abstain else [])
    think = f"[^<]{{0,{think_chars}}}" if think_chars else ""
    return think + "<vote>(?:" + "|".join(choices) + ")</vote>"


class DecodeProgram:
    """The decoding state of one row: which tokens are allowed next, and which were sampled.

    Subclasses implement :meth:`allowed` (a pure function of the state); :meth:`advance` records
    the token that was generated, and whether the model chose it, from the constraint it was
    generated under. :meth:`observe` sees each step's raw log-probabilities before sampling.
    """

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.scored: list[int] = []  # 1 = sampled by the model, 0 = forced
        self.done = False

    def allowed(self) -> tuple[list[int] | None, set[int]]:
        """``(only, banned)``: the only allowed ids (None = free) and ids banned when free."""
        raise NotImplementedError

    def observe(self, logprobs: Callable[[], Any]) -> None:
        """See the step's raw (temperature 1) log-probabilities, a (V,) tensor made on demand."""

    def advance(self, token: int) -> None:
        only, _ = self.allowed()  # the constraint ``token`` was sampled under (state not yet moved)
        self.tokens.append(token)
        self.scored.append(0 if only is not None and len(set(only)) == 1 else 1)


class ProgramsProcessor:
    """A ``transformers`` logits processor that runs each row's :class:`DecodeProgram`.

    At step t it first feeds every program the token sampled at step t-1, then applies each
    row's constraint: the only allowed ids, or free sampling with some ids banned. It runs after
    a log-prob recorder (which must see the raw logits) and before temperature/top-p. The last
    generated token never reaches a processor: :meth:`finish` feeds it once generation is over.
    """

    def __init__(self, programs: Sequence[DecodeProgram | None], prompt_width: int) -> None:
        self.programs = programs
        self.width = prompt_width

    def _feed(self, row: int, program: DecodeProgram, input_ids: Any) -> None:
        if input_ids.shape[1] - self.width > len(program.tokens):
            program.advance(int(input_ids[row, -1]))

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        for row, program in enumerate(self.programs):
            if program is None or program.done:
                continue
            self._feed(row, program, input_ids)
            if program.done:
                continue
            program.observe(lambda row=row: torch.log_softmax(scores[row].float(), dim=-1))
            only, banned = program.allowed()
            if only is not None:
                keep = scores[row, only].clone()
                scores[row] = float("-inf")
                scores[row, only] = keep
            elif banned:
                scores[row, sorted(banned)] = float("-inf")
        return scores

    def finish(self, sequences: Any) -> None:
        """Feed every unfinished program the last generated token of ``sequences`` (B, W + T)."""
        for row, program in enumerate(self.programs):
            if program is not None and not program.done:
                self._feed(row, program, sequences)


class _Trie:
    """Forced continuations: alternatives as token sequences; follow them as tokens arrive."""

    def __init__(self, sequences: Sequence[Sequence[int]]) -> None:
        self.sequences = [list(s) for s in sequences if s]
        self.position = 0
        self.live = list(range(len(self.sequences)))

    def next_tokens(self) -> list[int]:
        out: list[int] = []
        for i in self.live:
            seq = self.sequences[i]
            if self.position < len(seq) and seq[self.position] not in out:
                out.append(seq[self.position])
        return out

    def step(self, token: int) -> bool:
        """Follow ``token``; True when an alternative has been completed."""
        self.live = [
            i for i in self.live if self.position < len(self.sequences[i]) and self.sequences[i][self.position] == token
        ]
        self.position += 1
        return any(len(self.sequences[i]) == self.position for i in self.live) or not self.live


class VoteProgram(DecodeProgram):
    """``think_tokens`` of free reasoning (0: none), then a forced ``<vote>k</vote><eos>``.

    ``choices`` maps each vote text (``"3"``, ``"N/A"``) to its token ids; ``choice_step`` is the
    generated position at which the choice was made (None before), and ``choice_logprobs`` the
    raw log-probabilities of each choice's first token there (both set by the backend).
    """

    def __init__(
        self,
        prefix: Sequence[int],
        choices: Mapping[str, Sequence[int]],
        suffix: Sequence[int],
        eos: int,
        think_tokens: int = 0,
        lead: Sequence[int] = (),
    ) -> None:
        super().__init__()
        self.lead = list(lead)
        self.prefix = list(prefix)
        self.choices = {k: list(v) for k, v in choices.items()}
        self.suffix = list(suffix)
        self.eos = eos
        self.think_tokens = think_tokens
        self.trie: _Trie | None = None
        self.choice_logprobs: dict[str, float] = {}
        self.choice_step: int | None = None
        if think_tokens == 0:
            self.lead = []
            self._start_forcing(with_prefix=True)

    def _start_forcing(self, with_prefix: bool) -> None:
        head = self.lead + self.prefix if with_prefix else []
        self.trie = _Trie([head + ids + self.suffix + [self.eos] for ids in self.choices.values()])

    def first_tokens(self) -> dict[str, int]:
        """The token that picks each choice at the choice step."""
        return {k: ids[0] for k, ids in self.choices.items() if ids}

    def distribution(self) -> dict[str, float]:
        """The model's probability of each choice, renormalised over the choices (empty if unknown).

        Read at the choice step from the raw (temperature 1) logits of each choice's first token,
        so it is exact when choices differ in their first token (seats 1–9 and ``N/A``).
        """
        firsts = self.first_tokens()
        if not self.choice_logprobs or len(set(firsts.values())) < len(firsts):
            return {}
        import math

        top = max(self.choice_logprobs.values())
        weights = {k: math.exp(v - top) for k, v in self.choice_logprobs.items()}
        total = sum(weights.values())
        return {k: w / total for k, w in weights.items()}

    def at_choice(self) -> bool:
        return self.trie is not None and len(self.trie.next_tokens()) > 1

    def observe(self, logprobs: Callable[[], Any]) -> None:
        """At the choice step, record each choice's first-token log-probability."""
        if self.at_choice():
            raw = logprobs()
            self.choice_logprobs = {k: float(raw[t]) for k, t in self.first_tokens().items()}
            self.choice_step = len(self.tokens)

    def allowed(self) -> tuple[list[int] | None, set[int]]:
        if self.trie is None:
            return None, {self.eos}
        return self.trie.next_tokens(), set()

    def advance(self, token: int) -> None:
        super().advance(token)
        if self.trie is not None:
            if self.trie.step(token):
                self.done = True
            return
        wrote_prefix = self.prefix and self.tokens[-len(self.prefix) :] == self.prefix
        if wrote_prefix:  # the model opened the tag itself: force only the rest
            self._start_forcing(with_prefix=False)
        elif len(self.tokens) >= self.think_tokens:
            self._start_forcing(with_prefix=True)


class AnswerProgram(DecodeProgram):
    """Free text that ends with a ``\\boxed{}`` answer (see the module docstring).

    ``decode`` turns token ids into text (the tokenizer's), ``has_answer`` says whether a text
    holds a complete boxed answer. The body may use ``budget`` tokens; then ``opener`` is forced,
    the answer gets ``answer_tokens`` more, and ``closer`` (``}``) plus EOS close it if needed.
    """

    MAX_CLOSERS = 3  # braces a forced ending closes; an answer nested deeper stays unbalanced

    def __init__(
        self,
        budget: int,
        opener: Sequence[int],
        closer: Sequence[int],
        eos: int,
        decode: Callable[[list[int]], str],
        has_answer: Callable[[str], bool],
        answer_tokens: int = 12,
        closing_ids: frozenset[int] = frozenset(),
    ) -> None:
        super().__init__()
        self.closing_ids = closing_ids  # tokens that would close the box: banned while it is empty
        self.budget = budget
        self.opener, self.closer, self.eos = list(opener), list(closer), eos
        self.decode, self.has_answer = decode, has_answer
        self.answer_tokens = answer_tokens
        self.phase = "body"  # body → answer → close
        self.forced: list[int] = []
        self.answer_start = 0
        self._complete = False  # the body's text already holds a boxed answer
        self._pieces: dict[int, str] = {}  # token id -> its own text

    def allowed(self) -> tuple[list[int] | None, set[int]]:
        if self.forced:
            return [self.forced[0]], set()
        if self.phase == "body":
            return None, set() if self._complete else {self.eos}
        # answer: the model writes it, cannot stop inside it, and cannot leave it empty
        empty = not self.decode(self.tokens[self.answer_start :]).strip()
        return None, {self.eos, *self.closing_ids} if empty else {self.eos}

    def advance(self, token: int) -> None:
        super().advance(token)
        if self.forced:
            self.forced.pop(0)
            if token == self.eos:
                self.done = True
            elif not self.forced and self.phase == "opening":
                self.phase, self.answer_start = "answer", len(self.tokens)
            return
        if token == self.eos:
            self.done = True
            return
        if self.phase == "body":
            if self._may_complete_answer(token):
                self._complete = self.has_answer(self.decode(self.tokens))
            if len(self.tokens) >= self.budget:
                self.forced = [self.eos] if self._complete else list(self.opener)
                self.phase = "closing" if self._complete else "opening"
            return
        # answer phase: closed by the model's own unmatched "}", or by force at the budget
        answer = self.decode(self.tokens[self.answer_start :])
        if answer.count("}") > answer.count("{"):
            self.forced, self.phase = [self.eos], "closing"
        elif len(self.tokens) - self.answer_start >= self.answer_tokens:  # close every open brace
            depth = min(1 + answer.count("{") - answer.count("}"), self.MAX_CLOSERS)
            self.forced, self.phase = [*self.closer * depth, self.eos], "closing"

    def _may_complete_answer(self, token: int) -> bool:
        """Whether appending ``token`` can make the body hold a complete ``\\boxed{…}``.

        Only a closing brace can, and only while no answer is complete: appended text leaves every
        box that was closed closed, with the same content, so an answer once complete stays so,
        and text without ``}`` closes nothing. A brace is one ASCII byte, so a token adds one to
        the text exactly when its own text holds one. The body is decoded again only then, not at
        every token (which was quadratic in the body's length).
        """
        if self._complete:
            return False
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self.decode([token])
        return "}" in piece

    @staticmethod
    def reserved(opener: Sequence[int], closer: Sequence[int], answer_tokens: int) -> int:
        """Tokens the forced ending may need after the body: opener, answer, closers, EOS."""
        return len(opener) + answer_tokens + len(closer) * AnswerProgram.MAX_CLOSERS + 1
