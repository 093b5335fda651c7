"""A causal LM and its tokenizer as the ``hf`` backend plays them and a trainer trains them: the device and
dtype a name stands for (:func:`resolve_device`, :func:`resolve_dtype`; the ``vllm`` backend's engine
takes its dtype here too), the weights loaded (:func:`load_pretrained`: on an AMD CPU, float32 layers
compute their few-row products weights first, :mod:`agents.weights_first`) and, for playing on a CPU,
quantized to int8 (:func:`quantize_int8`)."""

from __future__ import annotations

import warnings
from typing import Any

from agents.threads import fit_threads

__all__ = ["load_pretrained", "native_bf16", "quantize_int8", "resolve_device", "resolve_dtype"]

INT8 = "int8"  # the dtype name of torch's dynamic int8 quantization (float32 weights, quantized once loaded)


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("the hf backend needs torch and transformers: pip install 'spyrl[hf]'") from e
    return torch


def resolve_device(device: str = "auto") -> str:
    """``auto``: ``cuda`` where torch sees a GPU, else ``cpu``; any other device as given."""
    torch = _torch()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX-512 BF16 or AMX), so bf16 weights run faster than fp32."""
    torch = _torch()
    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def resolve_dtype(dtype: Any, device: str):
    """A torch dtype from a name. ``auto``: bfloat16 on GPUs, float32 on CPUs (full precision for training);
    ``fast``: bfloat16 also on CPUs that compute it natively (:func:`native_bf16`), for playing. ``int8`` is
    no torch dtype but a way of loading (:func:`load_pretrained`, :func:`quantize_int8`): refused here, so no
    other loader (vLLM's) takes it for float32."""
    torch = _torch()
    if dtype == INT8:
        raise ValueError(
            "dtype int8 is the hf backend's (torch's dynamic quantization, on a CPU); here: auto, fast or a dtype"
        )
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype == "fast":
        return torch.bfloat16 if device.startswith("cuda") or native_bf16() else torch.float32
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
            raise ValueError(f"dtype must be auto, fast, float32, bfloat16, float16 or int8, got {dtype!r}") from e
    return dtype


def quantize_int8(model: Any) -> Any:
    """``model`` with the weights of its linear layers in int8, one scale per output channel, each product
    computed from them and the activations quantized on the fly (torch's dynamic quantization); the output
    head (the vote's logits), embeddings, norms and attention stay float32. For playing and evaluating on
    a CPU: a quantized model has no gradients. ``benchmarks/play_time.py`` times it and checks its
    constrained votes against float32's (per-tensor scales or an int8 head agreed on fewer than 95 of 100)."""
    torch = _torch()
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    head = model.get_output_embeddings()
    layers = {
        name: per_channel_dynamic_qconfig
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and module is not head
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.ao's eager quantization: deprecated, not gone
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        return quantize_dynamic(model, layers, dtype=torch.qint8)


def load_pretrained(
    path: str,
    *,
    dtype: Any = "auto",
    device: str = "auto",
    gguf_file: str | None = None,
    model_kwargs: dict[str, Any] | None = None,
) -> tuple[Any, Any]:
    """A causal LM, on ``device`` in ``dtype`` (:func:`resolve_device`, :func:`resolve_dtype`), and its
    tokenizer, by hub id or local folder (``gguf_file`` for GGUF weights; ``model_kwargs`` go to
    ``AutoModelForCausalLM.from_pretrained``): what :meth:`agents.hf.HFPolicy.from_pretrained` plays with and a
    trainer trains."""
    _torch()
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ImportError("the hf backend needs transformers: pip install 'spyrl[hf]'") from e
    device = resolve_device(device)
    if dtype == INT8 and device != "cpu":
        raise ValueError(f"dtype int8 runs on a CPU only, got device {device!r}")
    if device == "cpu":
        fit_threads()  # the cores free now, before the model's first product (agents.threads)
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(path, **extra)
    weights = "float32" if dtype == INT8 else dtype  # int8: float32 weights, quantized once loaded
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=resolve_dtype(weights, device), **extra, **(model_kwargs or {})
    )
    if dtype == INT8:
        model = quantize_int8(model.eval())  # its float32 head still a torch.nn.Linear
    if device == "cpu":
        from agents.weights_first import weights_first  # few-row products weights first (agents/weights_first.py)

        weights_first(model)
    return model.to(device), tokenizer
