"""How far SmolLM2-135M's prefill and decode are from this CPU's roofline, in float32, bfloat16 and int8.

Measures, in one run on this machine:

- the machine: peak matmul throughput (a 2048³ matmul, GFLOP/s) in each dtype and memory bandwidth:
  copying a 512 MB tensor (bytes read plus bytes written, GB/s) and summing one (bytes read: what a
  decode step does with its weights and cache);
- the model: FLOPs per token (2 per weight of every matmul, the tied output head included, plus
  attention over the context) and bytes read per decode step (every weight once, plus the KV cache of
  every row);
- prefill: tokens/s over a batch of 5 prompts of ``--context`` tokens (compute-bound: compared with
  the peak matmul throughput);
- decode: one step for 5 rows over a ``--context``-token cache reserved as :class:`agents.hf.HFPolicy`
  decodes (memory-bound in principle: compared with the bytes it must read at the measured bandwidths);
  in float32 with torch's linear layers and with weights-first products (:mod:`agents.weights_first`,
  what :func:`agents.pretrained.load_pretrained` gives on a CPU), the two interleaved step by step;
- int8 (``--dtype int8``: :func:`agents.hf.quantize_int8`, linear weights in int8, the head float32):
  the same prefill and decode, its bytes counted as stored.

bfloat16 is left out on a CPU that does not compute it natively (:func:`agents.pretrained.native_bf16`).

    python benchmarks/roofline.py [--context 1000] [--steps 20] [--model smollm2]
    python benchmarks/roofline.py --compile # also: decode with a static cache, eager vs torch.compile (minutes)
    python benchmarks/roofline.py --smoke   # a tiny random model, small measures: checks the path, not the speed
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


def best_seconds(fn, repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def machine(dtype: torch.dtype, size: int = 2048, copy_mb: int = 512) -> tuple[float, float, float]:
    """(peak matmul GFLOP/s, copy GB/s, read GB/s) in ``dtype``: a ``size``³ matmul; a ``copy_mb`` copy
    (read + write) and sum (read; the tensor filled, so no page is the shared zero page)."""
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    flops = 2 * size**3 / best_seconds(lambda: a @ b)
    src = torch.rand(copy_mb * 2**18, dtype=torch.float32)
    dst = torch.empty_like(src)
    copy = 2 * src.numel() * 4 / best_seconds(lambda: dst.copy_(src))
    read = src.numel() * 4 / best_seconds(lambda: src.sum())
    return flops / 1e9, copy / 1e9, read / 1e9


def int8_layers(model) -> list:
    """``model``'s linear layers with int8 weights (:func:`agents.hf.quantize_int8`)."""
    from torch.ao.nn.quantized.dynamic import Linear as Int8Linear

    return [m for m in model.modules() if isinstance(m, Int8Linear)]


def stored_bytes(model) -> int:
    """The bytes of ``model``'s weights as stored: its parameters, and the int8 weights of quantized layers."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return params + sum(m.weight().numel() + 4 * m.weight().size(0) for m in int8_layers(model))  # + scales


def model_costs(model, context: int, rows: int, dtype: torch.dtype) -> tuple[float, float]:
    """(FLOPs per prefill token at ``context``, bytes read per decode step of ``rows`` rows)."""
    c = model.config
    weights = sum(p.numel() for p in model.parameters()) + sum(m.weight().numel() for m in int8_layers(model))
    matmul_weights = weights - c.vocab_size * c.hidden_size * (0 if c.tie_word_embeddings else 1)  # the head computes
    head_dim = c.hidden_size // c.num_attention_heads
    attention = 4 * c.num_hidden_layers * c.num_attention_heads * head_dim * context  # QK^T and AV
    flops = 2 * matmul_weights + attention
    kv_per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * (torch.finfo(dtype).bits // 8)
    return flops, stored_bytes(model) + rows * context * kv_per_token


def measure(path: str, dtype: torch.dtype | str, context: int, steps: int) -> dict[str, float]:
    from transformers import AutoModelForCausalLM

    from agents.hf import INT8, quantize_int8
    from agents.prefix_cache import cache_argument, output_cache, reserve

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32 if dtype == INT8 else dtype).eval()
    if dtype == INT8:
        model, dtype = quantize_int8(model), torch.float32  # activations and KV cache stay float32
    rows = 5
    low, high = min(100, model.config.vocab_size // 2), min(10_000, model.config.vocab_size)  # ordinary tokens
    ids = torch.randint(low, high, (rows, context))
    with torch.inference_mode():
        prefill = best_seconds(lambda: model(input_ids=ids), repeats=2)
        cache = output_cache(model(input_ids=ids, use_cache=True))
        for layer in cache.layers:
            reserve(layer, context + steps)  # as HFPolicy decodes: appending in place
        token = torch.randint(low, high, (rows, 1))

        def step() -> None:
            model(input_ids=token, use_cache=True, **cache_argument(model, cache))

        decode = {"torch": [], "first": []}  # the model as loaded; its float32 linears weights first
        for _ in range(steps):  # the two forms interleaved, step by step, over the same growing cache
            for form in ("torch", "first") if dtype == torch.float32 else ("torch",):
                swap_linears(model, weights_first=form == "first")
                start = time.perf_counter()
                step()
                decode[form].append(time.perf_counter() - start)
    flops, step_bytes = model_costs(model, context, rows, dtype)
    out = {
        "prefill_tokens_s": rows * context / prefill,
        "prefill_gflops": rows * context * flops / prefill / 1e9,
        "flops_per_token": flops,
        "bytes_per_step": step_bytes,
    }
    for form, times in decode.items():
        if times:
            out[f"decode_{form}_ms"] = statistics.median(times) * 1e3
            out[f"decode_{form}_gb_s"] = step_bytes / statistics.median(times) / 1e9
    return out


def swap_linears(model, *, weights_first: bool) -> None:
    """Make ``model``'s float32 linear layers compute weights first (:mod:`agents.weights_first`), or not."""
    from agents.weights_first import WeightsFirstLinear

    plain, first = torch.nn.Linear, WeightsFirstLinear
    for module in model.modules():
        if type(module) is (first if not weights_first else plain) and module.weight.dtype == torch.float32:
            module.__class__ = first if weights_first else plain


def static_decode(path: str, context: int, steps: int, compiled: bool) -> tuple[float, float]:
    """(seconds to compile, median ms a float32 decode step) with transformers' static cache (fixed shapes:
    the cache preallocated to its full length), the forward eager or under ``torch.compile``."""
    from transformers import AutoModelForCausalLM, StaticCache

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rows, low = 5, min(100, model.config.vocab_size // 2)
    ids = torch.randint(low, low + 100, (rows, context))
    token = torch.randint(low, low + 100, (rows, 1))
    cache = StaticCache(config=model.config, max_cache_len=context + steps + 3)
    forward = torch.compile(model.forward, dynamic=False) if compiled else model.forward
    position = [context]

    def step() -> None:
        forward(input_ids=token, past_key_values=cache, cache_position=torch.tensor([position[0]]), use_cache=True)
        position[0] += 1

    with torch.inference_mode():
        model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(context), use_cache=True)
        start = time.perf_counter()
        step(), step()  # the first calls compile
        warm = time.perf_counter() - start
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
    return warm, statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> int:
    import tempfile
    import warnings

    from agents.models import resolve_model_path

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--context", type=int, default=1000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--model", default="smollm2", help="smollm2, tiny (a random model built here) or a model folder")
    p.add_argument("--smoke", action="store_true", help="the tiny model, a 64-token context, small machine measures")
    p.add_argument("--compile", action="store_true", help="also decode with a static cache, eager and torch.compile'd")
    args = p.parse_args(argv)
    if args.smoke:
        args.model, args.context, args.steps = "tiny", 64, 3
    size, copy_mb = (256, 16) if args.smoke else (2048, 512)
    warnings.filterwarnings("ignore", category=FutureWarning)
    path = resolve_model_path(args.model, tiny_dir=tempfile.mkdtemp(prefix="roofline-"))
    from agents.pretrained import native_bf16

    print(f"{torch.get_num_threads()} threads; batch of 5 rows, {args.context}-token context")
    if not native_bf16():  # emulated bf16 is hundreds of times slower: minutes of measuring, nothing learnt
        print("bfloat16: not native on this CPU (no AVX-512 BF16 or AMX), left out")
    for dtype in (torch.float32, torch.bfloat16, "int8") if native_bf16() else (torch.float32, "int8"):
        peak, copy, read = machine(torch.float32 if dtype == "int8" else dtype, size, copy_mb)
        m = measure(path, dtype, args.context, args.steps)
        name = str(dtype).removeprefix("torch.")
        print(
            f"{name}: machine {peak:.0f} GFLOP/s matmul{' (float32)' if dtype == 'int8' else ''}, {copy:.1f} GB/s "
            f"copy, {read:.1f} GB/s read; model {m['flops_per_token'] / 1e9:.3f} GFLOP/token, "
            f"{m['bytes_per_step'] / 1e6:.0f} MB/decode step"
        )
        print(
            f"  prefill {m['prefill_tokens_s']:.0f} tokens/s = {m['prefill_gflops']:.0f} GFLOP/s "
            f"({m['prefill_gflops'] / peak:.0%} of peak matmul)"
        )
        for form, label in (("torch", "decode "), ("first", "decode, weights first")):
            if f"decode_{form}_ms" not in m:
                continue
            ms, gb_s = m[f"decode_{form}_ms"], m[f"decode_{form}_gb_s"]
            ratio = f"; x{m['decode_torch_ms'] / ms:.2f} torch's linear" if form == "first" else ""
            print(
                f"  {label} {ms:.1f} ms/step = {gb_s:.1f} GB/s read "
                f"({gb_s / copy:.0%} of copy bandwidth, {gb_s / read:.0%} of read bandwidth{ratio})"
            )
    if args.compile:
        _, eager = static_decode(path, args.context, args.steps, compiled=False)
        warm, compiled = static_decode(path, args.context, args.steps, compiled=True)
        print(f"float32 decode, static cache: eager {eager:.1f} ms/step; torch.compile {compiled:.1f} ms/step ", end="")
        print(f"(×{eager / compiled:.2f}) after {warm:.0f} s compiling")
    return 0


if __name__ == "__main__":
    sys.exit(main())
