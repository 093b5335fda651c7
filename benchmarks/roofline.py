"""How far SmolLM2-135M's prefill and decode are from this CPU's roofline, in float32 and bfloat16.

Measures, in one run on this machine:

- the machine: peak matmul throughput (a 2048³ matmul, GFLOP/s) in each dtype and memory bandwidth
  (copying a 512 MB tensor, GB/s);
- the model: FLOPs per token (2 per weight of every matmul, the tied output head included, plus
  attention over the context) and bytes read per decode step (every weight once, plus the KV cache of
  every row);
- prefill: tokens/s over a batch of 5 prompts of ``--context`` tokens (compute-bound: compared with
  the peak matmul throughput);
- decode: one step for 5 rows over a ``--context``-token cache reserved as :class:`agents.hf.HFPolicy`
  decodes (memory-bound in principle: compared with the bytes it must read at the measured bandwidth).

    python benchmarks/roofline.py [--context 1000] [--steps 20] [--model smollm2]
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


def machine(dtype: torch.dtype, size: int = 2048, copy_mb: int = 512) -> tuple[float, float]:
    """(peak matmul GFLOP/s, copy bandwidth GB/s) in ``dtype``: a ``size``³ matmul, a ``copy_mb`` copy."""
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    flops = 2 * size**3 / best_seconds(lambda: a @ b)
    src = torch.empty(copy_mb * 2**18, dtype=torch.float32)
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() * 4 / best_seconds(lambda: dst.copy_(src))  # read + write
    return flops / 1e9, bandwidth / 1e9


def model_costs(model, context: int, rows: int, dtype: torch.dtype) -> tuple[float, float]:
    """(FLOPs per prefill token at ``context``, bytes read per decode step of ``rows`` rows)."""
    c = model.config
    weights = sum(p.numel() for p in model.parameters())
    matmul_weights = weights - c.vocab_size * c.hidden_size * (0 if c.tie_word_embeddings else 1)  # the head computes
    head_dim = c.hidden_size // c.num_attention_heads
    attention = 4 * c.num_hidden_layers * c.num_attention_heads * head_dim * context  # QK^T and AV
    flops = 2 * matmul_weights + attention
    size = torch.finfo(dtype).bits // 8
    kv_per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * size
    return flops, weights * size + rows * context * kv_per_token


def measure(path: str, dtype: torch.dtype, context: int, steps: int) -> dict[str, float]:
    from transformers import AutoModelForCausalLM

    from agents.prefix_cache import cache_argument, output_cache, reserve

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    rows = 5
    low, high = min(100, model.config.vocab_size // 2), min(10_000, model.config.vocab_size)  # ordinary tokens
    ids = torch.randint(low, high, (rows, context))
    with torch.inference_mode():
        prefill = best_seconds(lambda: model(input_ids=ids), repeats=2)
        cache = output_cache(model(input_ids=ids, use_cache=True))
        for layer in cache.layers:
            reserve(layer, context + steps)  # as HFPolicy decodes: appending in place
        token = torch.randint(low, high, (rows, 1))
        step_times = []
        for _ in range(steps):
            start = time.perf_counter()
            model(input_ids=token, use_cache=True, **cache_argument(model, cache))
            step_times.append(time.perf_counter() - start)
    flops, step_bytes = model_costs(model, context, rows, dtype)
    return {
        "prefill_tokens_s": rows * context / prefill,
        "prefill_gflops": rows * context * flops / prefill / 1e9,
        "decode_ms": statistics.median(step_times) * 1e3,
        "decode_gb_s": step_bytes / statistics.median(step_times) / 1e9,
        "flops_per_token": flops,
        "bytes_per_step": step_bytes,
    }


def main(argv: list[str] | None = None) -> int:
    import tempfile
    import warnings

    from agents.models import resolve_model_path

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--context", type=int, default=1000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--model", default="smollm2", help="smollm2, tiny (a random model built here) or a model folder")
    p.add_argument("--smoke", action="store_true", help="the tiny model, a 64-token context, small machine measures")
    args = p.parse_args(argv)
    if args.smoke:
        args.model, args.context, args.steps = "tiny", 64, 3
    size, copy_mb = (256, 16) if args.smoke else (2048, 512)
    warnings.filterwarnings("ignore", category=FutureWarning)
    path = resolve_model_path(args.model, tiny_dir=tempfile.mkdtemp(prefix="roofline-"))
    print(f"{torch.get_num_threads()} threads; batch of 5 rows, {args.context}-token context")
    for dtype in (torch.float32, torch.bfloat16):
        peak, bandwidth = machine(dtype, size, copy_mb)
        m = measure(path, dtype, args.context, args.steps)
        name = str(dtype).removeprefix("torch.")
        print(
            f"{name}: machine {peak:.0f} GFLOP/s matmul, {bandwidth:.1f} GB/s copy; "
            f"model {m['flops_per_token'] / 1e9:.3f} GFLOP/token, {m['bytes_per_step'] / 1e6:.0f} MB/decode step"
        )
        print(
            f"  prefill {m['prefill_tokens_s']:.0f} tokens/s = {m['prefill_gflops']:.0f} GFLOP/s "
            f"({m['prefill_gflops'] / peak:.0%} of peak matmul)"
        )
        print(
            f"  decode  {m['decode_ms']:.1f} ms/step = {m['decode_gb_s']:.1f} GB/s read "
            f"({m['decode_gb_s'] / bandwidth:.0%} of copy bandwidth)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
