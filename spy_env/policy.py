"""The contract between the environment's runner and any policy (docs/GUIDE.md, agents).

A policy maps a *batch* of observations to a batch of actions, so that one call can serve
many seats of many games (one batched LLM generation per stage). An action is either a plain
string or an :class:`Action` record carrying what a trainer needs (token ids, logprobs).
A :class:`RolloutPolicy` is a policy a trainer plays its rollouts with: it can restart its
sampling for each iteration and follow the trainer's weights.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["Action", "ClosablePolicy", "Observation", "Policy", "RolloutPolicy", "chat_messages", "policy_name"]

Observation = Mapping[str, Any]

# token ids are stored as int32 in the episode buffer
MAX_TOKEN_ID = 2**31 - 1


def _ints(values: Any, low: int, high: int) -> bool:
    return (
        isinstance(values, Sequence)
        and not isinstance(values, (str, bytes))
        and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and low <= v <= high for v in values)
    )


def _reals(values: Any) -> bool:
    return (
        isinstance(values, Sequence)
        and not isinstance(values, (str, bytes))
        and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values)
    )


# A log-probability is at most 0; this much above it is float rounding, more is not a logprob.
LOGPROB_SLACK = 1e-3


def token_problem(
    token_ids: Sequence[int], logprobs: Sequence[float], mask: Sequence[int], vote_probs: Sequence[float] = ()
) -> str | None:
    """Why per-token numbers cannot come from a model, or ``None``: the one check of a backend's
    reply (:meth:`Action.problem`) and of a loaded buffer row (:func:`spy_env.buffer.row_problem`).

    Token ids are integers, mask entries 0 or 1, logprobs and vote probabilities real numbers
    (a ``None``, a string or a bool is none of these); a logprob is finite and at most 0 (NaN only
    on a token decoding forced, mask 0: never scored); logprobs and mask have one entry per
    completion token (when both are given); a vote probability is in [0, 1] (1e-3 of rounding
    allowed). Linear, and in C when everything is fine.

    >>> token_problem([1, 2, 3], [float("nan"), float("inf"), 5.0], [])
    'logprobs holds nan for a token the model chose'
    >>> token_problem([1, 2, 3], [-0.5] * 7, [])
    'logprobs has 7 entries for 3 completion tokens'
    >>> token_problem([1, 2], [-0.5, float("nan")], [1, 0]) is None
    True
    >>> token_problem([1], [None], [])
    'logprobs holds None, not a number'
    """
    for name, values, kind in (
        ("completion_token_ids", token_ids, "an integer"),
        ("completion_mask", mask, "0 or 1"),
        ("logprobs", logprobs, "a number"),
        ("vote_probs", vote_probs, "a number"),
    ):
        bad = _misfit(values, integral=kind != "a number", binary=kind == "0 or 1")
        if bad is not _FITS:
            return f"{name} holds {bad!r}, not {kind}"
    if logprobs and not (all(map(math.isfinite, logprobs)) and max(logprobs) <= LOGPROB_SLACK):
        for k, value in enumerate(logprobs):
            forced = k < len(mask) and mask[k] == 0
            if math.isnan(value) and not forced:
                return "logprobs holds nan for a token the model chose"
            if not math.isnan(value) and not (math.isfinite(value) and value <= LOGPROB_SLACK):
                return f"logprobs holds {value}, not a log-probability"
    for name, values in (("logprobs", logprobs), ("completion_mask", mask)):
        if values and token_ids and len(values) != len(token_ids):
            return f"{name} has {len(values)} entries for {len(token_ids)} completion tokens"
    if vote_probs and not (all(map(math.isfinite, vote_probs)) and 0 <= min(vote_probs) <= max(vote_probs) <= 1.001):
        bad = next(v for v in vote_probs if not (math.isfinite(v) and 0 <= v <= 1.001))
        return f"vote probability {bad} is not in [0, 1]"
    return None


_FITS = object()  # what _misfit returns when every value fits (None is a value that does not)


def _misfit(values: Sequence[Any], *, integral: bool, binary: bool) -> Any:
    """The first of ``values`` that is not a real number (an integer when ``integral``, 0 or 1 when
    ``binary``), or ``_FITS``. The types are gathered in C; the Python loop runs only on odd types."""
    types = set(map(type, values))
    if types <= ({int} if integral else {float, int}) and not (binary and not set(values) <= {0, 1}):
        return _FITS
    kind = numbers.Integral if integral else numbers.Real
    for value in values:
        if isinstance(value, bool) or not isinstance(value, kind) or (binary and value not in (0, 1)):
            return value
    return _FITS


@dataclass(frozen=True)
class Action:
    """One completion and how it was produced.

    ``error`` is set when the policy failed to produce an answer (server down, timeout, crash);
    the game then receives ``text`` (usually empty) and records a forfeit.

    ``completion_mask`` marks, per completion token, whether the model chose it (1) or decoding
    forced it (0, e.g. the ``<vote>`` tags around a constrained choice); None means all chosen.
    ``vote_distribution`` maps each vote choice (``"3"``, ``"N/A"``) to the model's probability
    of it at the choice step, when the backend knows it. ``choice_step`` is the completion position
    of that choice and ``choice_tokens`` maps each choice to the token that picks it there: what a
    trainer needs to score the choice under the distribution it was drawn from (the model's,
    renormalised over the allowed choices).
    """

    text: str
    prompt_token_ids: Sequence[int] | None = None
    completion_token_ids: Sequence[int] | None = None
    logprobs: Sequence[float] | None = None
    finish_reason: str | None = None
    error: str | None = None
    completion_mask: Sequence[int] | None = None
    vote_distribution: Mapping[str, float] | None = None
    choice_step: int | None = None
    choice_tokens: Mapping[str, int] | None = None

    @classmethod
    def forfeit(cls, error: str) -> Action:
        return cls(text="", finish_reason="error", error=error)

    def problem(self) -> str | None:
        """Why this action cannot be recorded (a field of the wrong type or range), or ``None``.

        Backends pass through what servers send; one bad token id must cost that action, not the
        save of the whole buffer.

        >>> Action("x", completion_token_ids=[1, 2**31]).problem()
        'completion_token_ids: expected integers in [0, 2147483647]'
        >>> Action("x", logprobs=[-0.5, float("inf"), 5.0]).problem()
        'logprobs holds inf, not a log-probability'
        >>> Action("x", completion_token_ids=[1, 2, 3], logprobs=[-0.1] * 7).problem()
        'logprobs has 7 entries for 3 completion tokens'
        """
        checks = {
            "text": isinstance(self.text, str),
            "finish_reason": self.finish_reason is None or isinstance(self.finish_reason, str),
            "error": self.error is None or isinstance(self.error, str),
            "prompt_token_ids": self.prompt_token_ids is None or _ints(self.prompt_token_ids, 0, MAX_TOKEN_ID),
            "completion_token_ids": self.completion_token_ids is None
            or _ints(self.completion_token_ids, 0, MAX_TOKEN_ID),
            "completion_mask": self.completion_mask is None or _ints(self.completion_mask, 0, 1),
            "logprobs": self.logprobs is None or _reals(self.logprobs),
            "vote_distribution": self.vote_distribution is None
            or (
                isinstance(self.vote_distribution, Mapping)
                and all(isinstance(k, str) for k in self.vote_distribution)
                and _reals(list(self.vote_distribution.values()))
            ),
            "choice_step": self.choice_step is None or _ints([self.choice_step], 0, MAX_TOKEN_ID),
            "choice_tokens": self.choice_tokens is None
            or (
                isinstance(self.choice_tokens, Mapping)
                and all(isinstance(k, str) for k in self.choice_tokens)
                and _ints(list(self.choice_tokens.values()), 0, MAX_TOKEN_ID)
            ),
        }
        expected = {
            "prompt_token_ids": f"integers in [0, {MAX_TOKEN_ID}]",
            "completion_token_ids": f"integers in [0, {MAX_TOKEN_ID}]",
            "completion_mask": "0s and 1s",
            "logprobs": "numbers",
            "vote_distribution": "a mapping of choices to numbers",
            "choice_step": "a position >= 0",
            "choice_tokens": "a mapping of choices to token ids",
        }
        for field, ok in checks.items():
            if not ok:
                return f"{field}: expected {expected.get(field, 'a string')}"
        return token_problem(
            self.completion_token_ids or [],
            self.logprobs or [],
            self.completion_mask or [],
            list((self.vote_distribution or {}).values()),
        )

    @classmethod
    def of(cls, action: Any) -> Action:
        """What a policy returned, as an ``Action``: a string is its text; an ``Action`` whose
        fields cannot be recorded (:meth:`problem`) and anything else forfeit.

        >>> Action.of("<vote>2</vote>").text, Action.of(None).error
        ('<vote>2</vote>', 'policy returned NoneType, not str or Action')
        >>> Action.of(Action("x", completion_token_ids=["7"])).error
        'bad action: completion_token_ids: expected integers in [0, 2147483647]'
        """
        if isinstance(action, Action):
            problem = action.problem()
            return action if problem is None else cls.forfeit(f"bad action: {problem}")
        if isinstance(action, str):
            return cls(text=action)
        return cls.forfeit(f"policy returned {type(action).__name__}, not str or Action")


@runtime_checkable
class Policy(Protocol):
    """Anything with a ``name`` and a batched ``act``."""

    name: str

    def act(self, observations: Sequence[Observation]) -> Sequence[Action | str]:
        """Return one action per observation, in order."""
        ...


@runtime_checkable
class RolloutPolicy(Policy, Protocol):
    """A policy a trainer generates its rollouts with (its own model, or an engine kept in step with it)."""

    def restart_sampling(self, seed: int | None) -> None:
        """Sample from now on as a fresh run seeded by ``seed`` (a trainer calls it before each iteration's
        rollouts, so an iteration's samples depend on its seed alone, not on earlier iterations' calls)."""
        ...

    def sync(self) -> None:
        """Make generation use the trainer's current weights (after an update, or after a resume loaded
        a checkpoint); a no-op for a policy that generates with the trained model itself."""
        ...


@runtime_checkable
class ClosablePolicy(Policy, Protocol):
    """A policy that holds an engine or a process of its own (the vLLM backend): its owner calls ``close``
    when done with it, while the interpreter is whole."""

    def close(self) -> None:
        """Stop what the policy started; it acts no more."""
        ...


def policy_name(policy: object) -> str:
    """A policy's declared ``name`` (the :class:`Policy` protocol); its class name when it declares
    none, as a plain object with an ``act`` in a notebook may not. The one place a name is looked up."""
    return str(policy.name) if isinstance(policy, Policy) else type(policy).__name__


def chat_messages(observation: Observation) -> list[dict[str, str]]:
    """The observation as chat messages (system + user), ready for ``apply_chat_template``.

    An empty or missing ``system`` gives a single user turn.
    """
    user = {"role": "user", "content": observation["prompt"]}
    if not observation.get("system"):
        return [user]
    return [{"role": "system", "content": observation["system"]}, user]
