"""Prompt token ids through a tokenizer's own chat template, for every local backend (hf, vLLM).

One function, so the ``hf`` policy, the offline ``vllm`` policy and the trainer's vLLM rollouts
send a model exactly the same prompt tokens for the same observation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spy_env.policy import Observation, chat_messages

__all__ = ["encode_chat", "encode_observation"]


def encode_chat(tokenizer: Any, messages: Sequence[Mapping[str, str]], **template_kwargs: Any) -> list[int]:
    """Token ids of ``messages`` with the generation prompt, through ``tokenizer``'s chat template.

    Some templates reject a system turn (they raise): then the system turn is folded into the
    first user turn (``system + "\\n\\n" + user``) and the template applied again.
    ``template_kwargs`` go to ``apply_chat_template`` (e.g. ``enable_thinking=False``).
    """
    try:
        return _apply_template(tokenizer, messages, template_kwargs)
    except Exception:  # templates that reject a system turn: fold it into the user turn
        if len(messages) < 2:
            raise
        merged = [{"role": "user", "content": messages[0]["content"] + "\n\n" + messages[1]["content"]}]
        return _apply_template(tokenizer, merged, template_kwargs)


def encode_observation(tokenizer: Any, observation: Observation, **template_kwargs: Any) -> list[int]:
    """:func:`encode_chat` of an observation's chat messages (:func:`spy_env.policy.chat_messages`)."""
    return encode_chat(tokenizer, chat_messages(observation), **template_kwargs)


def _apply_template(
    tokenizer: Any, messages: Sequence[Mapping[str, str]], template_kwargs: dict[str, Any]
) -> list[int]:
    out = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, **template_kwargs)
    if isinstance(out, Mapping):  # a BatchEncoding (transformers v5 returns one)
        out = out["input_ids"]
    return list(out)
