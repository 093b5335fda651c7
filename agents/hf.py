"""``hf`` backend: a transformers causal LM generating in batches, on CPU or GPU.

Prompts are built with the tokenizer's chat template, sorted by length, left-padded and
generated in chunks of ``batch_size``. Every :class:`~spy_env.policy.Action` carries the prompt
and completion token ids and the log-probability of each sampled token under the model
(temperature 1, before top-p/top-k filtering: the quantity a policy-gradient ratio needs; the
same convention as vLLM's raw logprobs). The completion includes the EOS token when generation
stopped on it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from agents.sampling import SamplingParams
from spy_env.policy import Action, Observation, chat_messages

logger = logging.getLogger(__name__)

__all__ = ["HFPolicy", "resolve_device", "resolve_dtype"]


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("the hf backend needs torch and transformers: pip install 'spyrl[hf]'") from e
    return torch


def resolve_device(device: str = "auto") -> str:
    torch = _torch()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_dtype(dtype: Any, device: str):
    torch = _torch()
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if isinstance(dtype, str):
        try:
            return {
                "float32": torch.float32,
                "fp32": torch.float32,
                "bfloat16": torch.bfloat16,
                "bf16": torch.bfloat16,
                "float16": torch.float16,
                "fp16": torch.float16,
            }[dtype]
        except KeyError as e:
            raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {dtype!r}") from e
    return dtype


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


class _Constrain:
    """Logits processor that allows only the planned token ids at each step of a row."""

    def __init__(self, plans: Sequence[list[list[int]] | None], prompt_width: int) -> None:
        self.plans = plans
        self.width = prompt_width

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.width
        for row, plan in enumerate(self.plans):
            if plan is None:
                continue
            allowed = plan[min(step, len(plan) - 1)]
            keep = scores[row, allowed].clone()
            scores[row] = float("-inf")
            scores[row, allowed] = keep
        return scores


class HFPolicy:
    """A transformers model as a batched policy."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        sampling: SamplingParams | None = None,
        name: str = "hf",
        batch_size: int = 16,
        chat_template_kwargs: dict[str, Any] | None = None,
        constrained_votes: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingParams()
        self.name = name
        self.batch_size = batch_size
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.constrained_votes = constrained_votes
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
        sampling: SamplingParams | None = None,
        name: str | None = None,
        batch_size: int = 16,
        constrained_votes: bool = False,
        **model_kwargs: Any,
    ) -> HFPolicy:
        """Load a model and tokenizer by hub id or local folder (``gguf_file`` for GGUF weights)."""
        _torch()
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:
            raise ImportError("the hf backend needs transformers: pip install 'spyrl[hf]'") from e
        device = resolve_device(device)
        extra = {"gguf_file": gguf_file} if gguf_file else {}
        tokenizer = AutoTokenizer.from_pretrained(path, **extra)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(dtype, device), **extra, **model_kwargs)
        model.to(device).eval()
        return cls(
            model,
            tokenizer,
            sampling=sampling,
            name=name or f"hf:{path}",
            batch_size=batch_size,
            constrained_votes=constrained_votes,
        )

    # ------------------------------------------------------------------ policy
    def act(self, observations: Sequence[Observation]) -> list[Action]:
        plans = [self.vote_plan(obs) for obs in observations] if self.constrained_votes else None
        return self.generate([self.encode(obs) for obs in observations], plans)

    def vote_plan(self, observation: Observation) -> list[list[int]] | None:
        """Allowed token ids per step for a constrained vote ``<vote>k</vote><eos>``, or None.

        Only detection-stage observations are constrained, and only when every legal ``k``
        is a single token; the sampled choice is then the token ``k`` among the legal seats.
        """
        if observation.get("stage") != 1:
            return None
        seats = [i for i, ok in enumerate(observation["vote_targets"]) if ok]
        digits = [self.tokenizer.encode(str(s + 1), add_special_tokens=False) for s in seats]
        if not seats or any(len(d) != 1 for d in digits):
            return None
        prefix = self.tokenizer.encode("<vote>", add_special_tokens=False)
        suffix = self.tokenizer.encode("</vote>", add_special_tokens=False)
        eos = sorted(self.eos_ids)[:1]
        return [[t] for t in prefix] + [[d[0] for d in digits]] + [[t] for t in suffix] + [eos]

    def encode(self, observation: Observation) -> list[int]:
        """Prompt token ids of an observation, through the tokenizer's chat template."""
        messages = chat_messages(observation)
        try:
            ids = self._template(messages)
        except Exception:  # templates that reject a system turn: fold it into the user turn
            if len(messages) < 2:
                raise
            merged = [
                {
                    "role": "user",
                    "content": messages[0]["content"] + "\n\n" + messages[1]["content"],
                }
            ]
            ids = self._template(merged)
        return list(ids)

    def _template(self, messages: list[dict[str, str]]) -> list[int]:
        out = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, **self.chat_template_kwargs
        )
        if hasattr(out, "keys"):  # BatchEncoding
            out = out["input_ids"]
        return out

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        plans: Sequence[list[list[int]] | None] | None = None,
    ) -> list[Action]:
        """Generate one completion per prompt (token ids), in length-sorted chunks.

        ``plans`` optionally constrains a prompt's completion: allowed token ids per step.
        """
        plans = plans or [None] * len(prompts)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: list[Action | None] = [None] * len(prompts)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            batch = self._generate_batch([prompts[i] for i in chunk], [plans[i] for i in chunk])
            for i, action in zip(chunk, batch, strict=True):
                results[i] = action
        return results  # type: ignore[return-value]

    def _generation_config(self):
        from transformers import GenerationConfig

        s = self.sampling
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
        self, prompts: Sequence[Sequence[int]], plans: Sequence[list[list[int]] | None]
    ) -> list[Action]:
        torch = _torch()
        from transformers import LogitsProcessorList

        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):  # left padding
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
        if self.sampling.seed is not None:
            torch.manual_seed(self.sampling.seed + self._calls)
        self._calls += 1
        recorder = _SampledLogprobs()
        processors: list[Any] = [recorder]  # first: it must see the raw logits
        if any(plan is not None for plan in plans):
            processors.append(_Constrain(plans, width))
        with torch.inference_mode():
            sequences = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                generation_config=self._generation_config(),
                logits_processor=LogitsProcessorList(processors),
            )
        completions = sequences[:, width:].cpu()
        logprobs = recorder.finish(sequences).cpu()
        actions = []
        for row, prompt in enumerate(prompts):
            tokens = completions[row].tolist()
            stop = next((i for i, t in enumerate(tokens) if t in self.eos_ids), None)
            kept = tokens if stop is None else tokens[: stop + 1]
            actions.append(
                Action(
                    text=self.tokenizer.decode(kept, skip_special_tokens=True),
                    prompt_token_ids=list(prompt),
                    completion_token_ids=kept,
                    logprobs=logprobs[row, : len(kept)].tolist(),
                    finish_reason="stop" if stop is not None else "length",
                )
            )
        return actions
