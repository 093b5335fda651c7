"""``hf`` backend: a transformers causal LM generating in batches, on CPU or GPU.

Prompts are built with the tokenizer's chat template, sorted by length, left-padded and
generated in chunks of ``batch_size``. Every :class:`~spy_env.policy.Action` carries the prompt
and completion token ids and the log-probability of each sampled token under the model
(temperature 1, before top-p/top-k filtering: the quantity a policy-gradient ratio needs; the
same convention as vLLM's raw logprobs). The completion includes the EOS token when generation
stopped on it.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Sequence
from typing import Any

from agents.chat import encode_observation
from agents.decoding import (
    AnswerProgram,
    DecodeProgram,
    DecodingOptions,
    ProgramsProcessor,
    VoteProgram,
    is_vote,
    vote_choices,
)
from agents.prefix_cache import cache_argument, prefill, prefix_groups
from agents.pretrained import INT8 as INT8  # also named here: scripts load through the backend
from agents.pretrained import _torch, load_pretrained
from agents.pretrained import native_bf16 as native_bf16
from agents.pretrained import quantize_int8 as quantize_int8
from agents.registry import register_backend, some_argument
from agents.sampling import SamplingParams
from agents.tensors import left_pad
from spy_env.parsing import last_boxed
from spy_env.policy import Action, Observation

logger = logging.getLogger(__name__)

__all__ = ["HFPolicy", "load_hf"]


class _SampledLogprobs:
    """Logits processor that records log p(token) of each sampled token from the raw logits.

    At step t it sees the token sampled at step t-1 (the last column of ``input_ids``) and
    gathers its log-probability from the previous step's distribution, so it holds only one
    (B, V) tensor at a time instead of all logits.
    """

    def __init__(self) -> None:
        self.previous = None
        self.columns: list[Any] = []

    def __call__(self, input_ids, scores):
        torch = _torch()
        if self.previous is not None:
            self.columns.append(self.previous.gather(1, input_ids[:, -1:]).squeeze(1))
        self.previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, sequences):
        """(B, T) log-probs of the T generated tokens, given the final ``sequences``."""
        torch = _torch()
        if self.previous is not None:
            self.columns.append(self.previous.gather(1, sequences[:, -1:]).squeeze(1))
        if not self.columns:
            return torch.zeros(sequences.shape[0], 0)
        return torch.stack(self.columns, dim=1)


class HFPolicy:
    """A transformers model as a batched policy.

    ``decoding`` (a :class:`~agents.decoding.DecodingOptions`) shapes replies while they are
    decoded (see :mod:`agents.decoding`); actions then carry
    ``completion_mask`` (1 for the tokens the model chose, 0 for forced ones) and, for votes,
    ``vote_distribution`` (the model's probability of each choice at the choice step).
    The attribute ``perform_sampling`` (None: as ``sampling``) samples every reply but a vote (the
    performances) its own way; the trainer sets it from ``decoding.perform_temperature``.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        sampling: SamplingParams | None = None,
        name: str = "hf",
        batch_size: int = 16,
        chat_template_kwargs: dict[str, Any] | None = None,
        decoding: DecodingOptions | None = None,
        share_prefix: bool = True,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.decoding = decoding or DecodingOptions()
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingParams()
        self.perform_sampling: SamplingParams | None = None
        self.name = name
        self.batch_size = batch_size
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._closing: frozenset[int] | None = None
        self.share_prefix = share_prefix
        self._calls = 0
        eos = getattr(model.generation_config, "eos_token_id", None) or tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(self.eos_ids))

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        *,
        dtype: Any = "auto",
        device: str = "auto",
        gguf_file: str | None = None,
        model_kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> HFPolicy:
        """Load a model and tokenizer by hub id or local folder (``gguf_file`` for GGUF weights;
        :func:`agents.pretrained.load_pretrained`).

        ``model_kwargs`` go to ``AutoModelForCausalLM.from_pretrained``; ``options`` (``sampling``,
        ``name``, ``batch_size``, ``decoding``, ``share_prefix``, ...) to the policy's constructor.
        """
        model, tokenizer = load_pretrained(
            path, dtype=dtype, device=device, gguf_file=gguf_file, model_kwargs=model_kwargs
        )
        options.setdefault("name", f"hf:{path}")
        return cls(model.eval(), tokenizer, **options)

    # ------------------------------------------------------------------ policy
    def act(self, observations: Sequence[Observation]) -> list[Action]:
        prompts, programs = [self.encode(obs) for obs in observations], [self.program(obs) for obs in observations]
        if self.perform_sampling is None:
            return self.generate(prompts, programs)
        out: list[Action | None] = [None] * len(observations)
        votes = [is_vote(obs) for obs in observations]
        for sampling, wanted in ((self.sampling, True), (self.perform_sampling, False)):
            rows = [i for i, vote in enumerate(votes) if vote is wanted]
            if rows:
                actions = self.generate([prompts[i] for i in rows], [programs[i] for i in rows], sampling=sampling)
                for i, action in zip(rows, actions, strict=True):
                    out[i] = action
        return out  # type: ignore[return-value]

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _closing_ids(self) -> frozenset[int]:
        """Token ids whose text starts (after blanks) with ``}``: they would leave a box empty."""
        if self._closing is None:
            vocab = self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))
            candidates = [i for i, t in enumerate(vocab) if t and "}" in t]
            self._closing = frozenset(i for i in candidates if self.tokenizer.decode([i]).lstrip().startswith("}"))
        return self._closing

    def program(self, observation: Observation) -> DecodeProgram | None:
        """The decoding program of an observation's reply (None: free sampling)."""
        eos = sorted(self.eos_ids)[0]
        if is_vote(observation):
            return self._vote_program(observation, eos)
        return self._answer_program(eos) if self.decoding.ending.forces_answer else None

    def _vote_program(self, observation: Observation, eos: int) -> VoteProgram | None:
        if not self.decoding.vote.scores_choices:
            return None
        choices = {k: self._ids(k) for k in vote_choices(observation, self.decoding.offers_abstain)}
        if not choices:
            return None
        thinking = self.decoding.vote.uses_thinking
        return VoteProgram(
            self._ids("<vote>"),
            choices,
            self._ids("</vote>"),
            eos,
            think_tokens=self.decoding.think_tokens if thinking else 0,
            lead=self._ids("\n") if thinking else (),
        )

    def _answer_program(self, eos: int) -> AnswerProgram:
        opener, closer = self._ids("\n\n\\boxed{"), self._ids("}")
        answer_tokens = self.decoding.answer_tokens
        room = (self.perform_sampling or self.sampling).max_new_tokens
        budget = room - AnswerProgram.reserved(opener, closer, answer_tokens)
        if budget < 1:
            raise ValueError(f"max_new_tokens ({room}) leaves no room for a boxed answer of {answer_tokens} tokens")
        return AnswerProgram(
            budget,
            opener,
            closer,
            eos,
            decode=lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True),
            has_answer=lambda text: last_boxed(text) is not None,
            answer_tokens=answer_tokens,
            closing_ids=self._closing_ids(),
        )

    def encode(self, observation: Observation) -> list[int]:
        """Prompt token ids of an observation, through the tokenizer's chat template
        (:func:`agents.chat.encode_chat`: a system turn the template rejects is folded in)."""
        return encode_observation(self.tokenizer, observation, **self.chat_template_kwargs)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        programs: Sequence[DecodeProgram | None] | None = None,
        *,
        sampling: SamplingParams | None = None,
    ) -> list[Action]:
        """Generate one completion per prompt (token ids), in chunks of ``batch_size``.

        Chunks are cut from the prompts in sorted order (prompts sharing a prefix side by side) when
        prefixes are shared, else by length. ``programs`` optionally shapes a prompt's completion
        (see :mod:`agents.decoding`); ``sampling`` replaces the policy's own for this call.
        """
        sampling = sampling or self.sampling
        programs = programs or [None] * len(prompts)
        key = (lambda i: list(prompts[i])) if self.share_prefix else (lambda i: len(prompts[i]))
        order = sorted(range(len(prompts)), key=key)
        results: list[Action | None] = [None] * len(prompts)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            batch = self._generate_batch([prompts[i] for i in chunk], [programs[i] for i in chunk], sampling)
            for i, action in zip(chunk, batch, strict=True):
                results[i] = action
        return results  # type: ignore[return-value]

    def _generation_config(self, s: SamplingParams):
        from transformers import GenerationConfig

        kwargs: dict[str, Any] = {
            "max_new_tokens": s.max_new_tokens,
            "do_sample": not s.greedy,
            "pad_token_id": self.pad_id,
            "eos_token_id": sorted(self.eos_ids),
        }
        if not s.greedy:
            kwargs.update(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k or None)
        return GenerationConfig(**kwargs)

    def _generate_batch(
        self, prompts: Sequence[Sequence[int]], programs: Sequence[DecodeProgram | None], sampling: SamplingParams
    ) -> list[Action]:
        torch = _torch()
        from transformers import LogitsProcessorList

        device = next(self.model.parameters()).device
        rows, input_ids, attention_mask, cache = self._batch_inputs(prompts, sampling.max_new_tokens)
        prompts, programs = [prompts[r] for r in rows], [programs[r] for r in rows]
        width = input_ids.shape[1]
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed + self._calls)
        self._calls += 1
        recorder = _SampledLogprobs()
        processors: list[Any] = [recorder]  # first: it must see the raw logits
        runner = ProgramsProcessor(programs, width) if any(p is not None for p in programs) else None
        if runner is not None:
            processors.append(runner)
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*past_key_values.*", category=FutureWarning)  # renamed in v5
            sequences = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                **cache_argument(self.model, cache),
                generation_config=self._generation_config(sampling),
                logits_processor=LogitsProcessorList(processors),
            )
        if runner is not None:
            runner.finish(sequences)
        completions = sequences[:, width:].cpu()
        logprobs = recorder.finish(sequences).cpu()
        actions: list[Action | None] = [None] * len(rows)
        for row, (prompt, program) in enumerate(zip(prompts, programs, strict=True)):
            actions[rows[row]] = self._action(prompt, completions[row].tolist(), logprobs[row], program)
        return actions  # type: ignore[return-value]

    def _batch_inputs(self, prompts: Sequence[Sequence[int]], room: int) -> tuple[list[int], Any, Any, Any]:
        """``(rows, input_ids, attention_mask, cache)``: the batch in the order ``rows``, left-padded.

        With ``share_prefix``, prompts are grouped by common prefix and each group's prefix is
        encoded once (:mod:`agents.prefix_cache`): ``cache`` then covers all but the last column.
        Otherwise ``cache`` is None and ``generate`` prefills every row itself.
        """
        torch = _torch()
        if self.share_prefix and len(prompts) > 1 and min(len(p) for p in prompts) > 1:
            with torch.inference_mode():
                return prefill(self.model, prompts, self.pad_id, prefix_groups(prompts), room=room)
        input_ids, attention_mask = left_pad(prompts, self.pad_id)
        return list(range(len(prompts))), input_ids, attention_mask, None

    def _action(self, prompt: Sequence[int], tokens: list[int], logprobs: Any, program: DecodeProgram | None) -> Action:
        """One row's completion as an :class:`Action`: cut after its first EOS, with its mask and vote distribution."""
        stop = next((i for i, t in enumerate(tokens) if t in self.eos_ids), None)
        kept = tokens if stop is None else tokens[: stop + 1]
        mask = distribution = choice_step = choice_tokens = None
        if program is not None:
            mask = list(program.scored[: len(kept)])
            if isinstance(program, VoteProgram):
                distribution = program.distribution()
                if distribution and program.choice_step is not None and program.choice_step < len(kept):
                    choice_step, choice_tokens = program.choice_step, program.first_tokens()
        return Action(
            text=self.tokenizer.decode(kept, skip_special_tokens=True),
            prompt_token_ids=list(prompt),
            completion_token_ids=kept,
            logprobs=logprobs[: len(kept)].tolist(),
            finish_reason="stop" if stop is not None else "length",
            completion_mask=mask,
            vote_distribution=distribution,
            choice_step=choice_step,
            choice_tokens=choice_tokens,
        )

    # ----------------------------------------------- rollout policy (spy_env.policy.RolloutPolicy)
    def restart_sampling(self, seed: int | None) -> None:
        """Sample as a fresh run seeded by ``seed``: generation call k of the run draws with ``seed + k``."""
        self.sampling = dataclasses.replace(self.sampling, seed=seed)
        if self.perform_sampling is not None:
            self.perform_sampling = dataclasses.replace(self.perform_sampling, seed=seed)
        self._calls = 0

    def sync(self) -> None:
        """Nothing to push: this policy generates with the trained model itself."""


def _missing_folder(argument: str, backend: str = "hf") -> str | None:
    """A path that looks local must be a model folder: a folder holding ``config.json`` or a
    ``.gguf`` file (anything else is a hub id, resolved on load). ``hf:/etc`` is named as what it
    is, not as transformers' complaint about a missing tokenizer library."""
    from pathlib import Path

    if not argument.startswith(("/", "./", "../", "~")):
        return None
    folder = Path(argument).expanduser()
    if not folder.is_dir():
        return f"agent spec {backend + ':' + argument!r}: model folder {argument!r} does not exist"
    if not (folder / "config.json").is_file() and not any(folder.glob("*.gguf")):
        return (
            f"agent spec {backend + ':' + argument!r}: {argument!r} is not a model folder (it holds no config.json "
            "or .gguf file)"
        )
    return None


@register_backend(
    "hf",
    spec="hf:PATH_OR_ID",
    help="a transformers model: chat template, batched left-padded generation, token ids and per-token "
    "logprobs; CPU or GPU, `dtype`/`device` options",
    accepts=some_argument,
    llm=True,
    decoding=True,
    check=_missing_folder,
)
def load_hf(argument: str, *, sampling: SamplingParams, **kwargs: Any) -> HFPolicy:
    """``hf:PATH_OR_ID``: :meth:`HFPolicy.from_pretrained` (checked by :func:`_missing_folder`)."""
    return HFPolicy.from_pretrained(argument, sampling=sampling, **kwargs)
