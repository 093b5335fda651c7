"""Tiny random causal LMs for fast tests and benchmarks (no download).

:func:`build_tiny_model` trains a byte-level BPE on the embedded corpus with ``tokenizers``,
gives it a ChatML chat template, builds a small Llama from a config and saves both to a folder,
so they reload by path like any hub model (a frozen reference model needs that).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["CHATML_TEMPLATE", "build_tiny_model"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_model(
    path: str | os.PathLike,
    *,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    seed: int = 0,
    **config_overrides: Any,
) -> Path:
    """Write a tiny Llama + BPE tokenizer to ``path`` (if not already there); return the path."""
    path = Path(path)
    if (path / "config.json").exists() and (path / "tokenizer.json").exists():
        return path
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        raise ImportError("tiny models need torch, tokenizers and transformers: pip install 'spyrl[hf]'") from e
    tokenizer = _train_tokenizer(vocab_size)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=16_384,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **config_overrides,
    )
    _save(LlamaForCausalLM(config), tokenizer, path)
    return path


def _train_tokenizer(vocab_size: int) -> Any:
    """A byte-level BPE trained on the embedded corpus (plus the game's tags), with a ChatML template."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast
    except ImportError as e:
        raise ImportError("tiny models need torch, tokenizers and transformers: pip install 'spyrl[hf]'") from e
    from spy_env.corpus import load_embedded

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = [doc.text for doc in load_embedded()]
    corpus += ["<vote>1</vote> <vote>N/A</vote> \\boxed{} Player 1 2 3 4 5"] * 20
    bpe.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def _save(model: Any, tokenizer: Any, path: Path) -> None:
    """Save both into ``path`` at once: written beside it, then renamed into place."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        os.replace(tmp, path)
    except OSError:  # another process won the race; its copy is identical
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
