"""Rollouts through vLLM against the hf backend, side by side on this machine (SmolLM2-135M, float32).

Each backend runs in a process of its own (so start-up, memory and vLLM's thread settings are its
own), one after the other, on the same seeded games:

- start-up: building the policy (vLLM: the engine and its processes; hf: loading the model);
- decode: ``--rows`` short prompts × 128 new tokens, greedy, every row decoding to the end (tokens/s),
  and its achieved memory bandwidth (every weight read once per step) as a share of this machine's
  copy bandwidth (``benchmarks/roofline.py``'s measure);
- play: one 5-player game as ``spyrl play`` plays it (batch 5: think-then-vote, boxed answers,
  96 new tokens, temperature 0.7), completion tokens/s and seconds;
- training batch: ``--train-games`` games at once (batch 5 × games), the same settings;
- peak memory: the resident set of the process and its children (vLLM's engine), sampled.

vLLM kinds: ``vllm`` (spyrl's CPU settings, :mod:`agents.vllm_settings`: threads on every core) and
``vllm-reserved`` (vLLM's own default, ``VLLM_CPU_NUM_OF_RESERVED_CPU=1``: one core kept for its front end).

    python benchmarks/vllm_rollout.py [--kinds hf vllm vllm-reserved] [--rows 5 20] [--train-games 4]
    python benchmarks/vllm_rollout.py --smoke   # hf and vllm on a tiny random model, small: checks the path
    python benchmarks/vllm_rollout.py --iteration   # one smollm2-selfplay iteration, hf rollouts vs vllm-colocate

Needs vLLM (``bash tools/install_vllm_cpu.sh`` on a CPU) and the SmolLM2 wheel.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

KINDS = ("hf", "vllm", "vllm-reserved")


def peak_rss_sampler() -> tuple[threading.Event, list[float]]:
    """Start sampling this process tree's resident memory (MB); set the event to stop."""
    import psutil

    stop, peak = threading.Event(), [0.0]

    def sample() -> None:
        me = psutil.Process()
        while not stop.is_set():
            try:
                total = sum(p.memory_info().rss for p in [me, *me.children(recursive=True)])
            except psutil.Error:
                continue
            peak[0] = max(peak[0], total / 2**20)
            time.sleep(0.1)

    threading.Thread(target=sample, daemon=True).start()
    return stop, peak


def load(kind: str, model: str):
    import agents
    from agents.decoding import DecodingOptions

    sampling = agents.SamplingParams(temperature=0.7, max_new_tokens=96, seed=0)
    decoding = DecodingOptions("think-then-vote", answer="boxed")  # spyrl play's defaults
    backend = "hf" if kind == "hf" else "vllm"
    spec = f"{backend}:{model}" if model != "smollm2" else "smollm2" if kind == "hf" else "vllm:smollm2"
    kwargs = {"kv_cache_gib": 0.25} if kind != "hf" and model != "smollm2" else {}
    return agents.load(spec, sampling=sampling, decoding=decoding, dtype="float32", **kwargs)


def decode(policy, kind: str, rows: int) -> float:
    """Tokens/s of ``rows`` prompts × 128 greedy new tokens, every row to the end."""
    prompts = [[{"role": "user", "content": f"Explain, step {i}, why the sum of two even numbers is even."}]
               for i in range(rows)]  # fmt: skip
    from agents.chat import encode_chat

    ids = [encode_chat(policy.tokenizer, p) for p in prompts]
    if kind == "hf":
        import torch

        batch = torch.nn.utils.rnn.pad_sequence(
            [torch.tensor(i[::-1]) for i in ids], batch_first=True, padding_value=policy.tokenizer.eos_token_id
        ).flip(1)  # left padding
        mask = torch.arange(batch.shape[1])[None] >= batch.shape[1] - torch.tensor([len(i) for i in ids])[:, None]
        start = time.perf_counter()
        with torch.inference_mode():
            out = policy.model.generate(input_ids=batch, attention_mask=mask.long(), max_new_tokens=128,
                                        min_new_tokens=128, do_sample=False, pad_token_id=policy.tokenizer.eos_token_id)  # fmt: skip
        seconds = time.perf_counter() - start
        return (out.shape[1] - batch.shape[1]) * rows / seconds
    import vllm
    from vllm.inputs import TokensPrompt

    params = vllm.SamplingParams(temperature=0.0, max_tokens=128, ignore_eos=True)
    start = time.perf_counter()
    outs = policy.llm.generate([TokensPrompt(prompt_token_ids=i) for i in ids], params, use_tqdm=False)
    seconds = time.perf_counter() - start
    return sum(len(o.outputs[0].token_ids) for o in outs) / seconds


def play(policy, games: int, seed: int) -> tuple[float, float]:
    """(completion tokens/s, seconds) of ``games`` seeded 5-player games played at once (other seeds than the
    warm-up's, so vLLM's prefix cache holds none of their prompts)."""
    import spy_env
    from spy_env.runner import Runner

    policy.restart_sampling(seed)
    runner = Runner(spy_env.GameConfig(), games_per_document=1, max_concurrent_games=games)
    start = time.perf_counter()
    buffer = runner.run([policy] * 5, games, seed=seed)
    seconds = time.perf_counter() - start
    return sum(len(r["completion_token_ids"]) for r in buffer) / seconds, seconds


def one(kind: str, model: str, rows: list[int], train_games: int) -> dict[str, float]:
    stop, peak = peak_rss_sampler()
    start = time.perf_counter()
    policy = load(kind, model)
    out: dict[str, float] = {"startup_s": time.perf_counter() - start}
    decode(policy, kind, 2)  # warm-up
    for r in rows:
        out[f"decode_{r}_tok_s"] = decode(policy, kind, r)
    play(policy, 1, seed=100)  # warm-up
    out["play_tok_s"], out["play_s"] = play(policy, 1, seed=0)
    out["train_tok_s"], out["train_s"] = play(policy, train_games, seed=1)
    if kind != "hf":
        policy.close()  # the engine stopped while Python is whole, not at the interpreter's exit
    stop.set()
    out["peak_rss_mb"] = peak[0]
    return out


def copy_bandwidth() -> float:
    """GB/s of copying a 512 MB float32 tensor (read + write), best of 5: benchmarks/roofline.py's measure."""
    import torch

    src = torch.empty(128 * 2**20, dtype=torch.float32)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(6):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.numel() * 4 / best / 1e9


def weight_bytes(model: str) -> int:
    from agents.models import resolve_model_path

    config = json.loads((Path(resolve_model_path(model)) / "config.json").read_text())
    h, i, v, n = config["hidden_size"], config["intermediate_size"], config["vocab_size"], config["num_hidden_layers"]
    kv = config["num_key_value_heads"] * config.get("head_dim", h // config["num_attention_heads"])
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * i
    return 4 * (n * per_layer + v * h)  # float32; the tied head read once more than stored


def smoke(args: argparse.Namespace) -> None:
    """--smoke: hf and vllm on a tiny random model (two heads of 32: vLLM's CPU attention), 2 rows, one game."""
    import tempfile

    from agents.tiny import build_tiny_model

    args.kinds, args.rows, args.train_games = ["hf", "vllm"], [2], 1
    args.model = str(build_tiny_model(Path(tempfile.mkdtemp(prefix="vllm-rollout-")) / "tiny", num_heads=2))


def iterations(documents: int, tiny: bool) -> int:
    """One ``smollm2-selfplay`` iteration with hf rollouts and with vllm-colocate rollouts, each in a process of
    its own (``benchmarks/smollm2_iteration.py --iteration-only``); prints both and the ratio."""
    seconds = {}
    for generation in ("hf", "vllm-colocate"):
        command = [sys.executable, str(Path(__file__).with_name("smollm2_iteration.py")), "--iteration-only",
                   "--documents", str(documents), "--set", f"rollout.generation={generation}"]  # fmt: skip
        command += ["--smoke"] if tiny else []
        run = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
        if run.returncode != 0:
            print(f"{generation}: failed\n{run.stderr[-2000:]}")
            return 1
        print(f"--- rollout.generation={generation}\n{run.stdout.strip()}", flush=True)
        seconds[generation] = float(re.search(r"^iteration\s+([\d.]+) s", run.stdout, re.M).group(1))
    print(f"\none smollm2-selfplay iteration, vllm-colocate / hf time: {seconds['vllm-colocate'] / seconds['hf']:.2f}x")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--rows", nargs="+", type=int, default=[5, 20])
    parser.add_argument("--train-games", type=int, default=4)
    parser.add_argument(
        "--model", default="smollm2", help="smollm2, tiny (a random model built here) or a model folder"
    )
    parser.add_argument("--smoke", action="store_true", help="hf and vllm, a tiny random model, 2 rows, one game")
    parser.add_argument("--iteration", action="store_true", help="one smollm2-selfplay iteration: hf vs vllm-colocate")
    parser.add_argument("--documents", type=int, default=4, help="documents of that iteration")
    parser.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.iteration:
        return iterations(args.documents, args.smoke)
    if args.one:
        print("RESULT " + json.dumps(one(args.one, args.model, args.rows, args.train_games)), flush=True)
        return 0
    if args.smoke:
        smoke(args)
    import torch

    bandwidth = copy_bandwidth()
    cpuinfo = Path("/proc/cpuinfo")
    flags = set(cpuinfo.read_text().split()) if cpuinfo.exists() else set()
    shown = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    print(f"CPU: {os.cpu_count()} cores, flags {' '.join(shown) or 'none of avx2/avx512'}; copy bandwidth "
          f"{bandwidth:.1f} GB/s; torch threads {torch.get_num_threads()}")  # fmt: skip
    results = {}
    for kind in args.kinds:
        env = dict(os.environ)
        if kind == "vllm-reserved":
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "1"
        env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        command = [sys.executable, __file__, "--one", kind, "--model", args.model, "--rows", *map(str, args.rows),
                   "--train-games", str(args.train_games)]  # fmt: skip
        run = subprocess.run(command, env=env, capture_output=True, text=True)
        line = next((ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            print(f"{kind}: failed\n{run.stderr[-2000:]}")
            continue
        results[kind] = json.loads(line[len("RESULT ") :])
    step_bytes = weight_bytes(args.model)
    print(f"\n{'kind':<15}" + "".join(f"{k:>16}" for k in results))
    for key in next(iter(results.values()), {}):
        print(f"{key:<15}" + "".join(f"{r[key]:>16.1f}" for r in results.values()))
    for r in args.rows:
        shares = [res[f"decode_{r}_tok_s"] / r * step_bytes / 1e9 / bandwidth for res in results.values()]
        print(f"{'bw_share_' + str(r):<15}" + "".join(f"{s:>16.2f}" for s in shares))
    if "hf" in results:
        for kind, res in results.items():
            if kind == "hf":
                continue
            ratios = {k: res[k] / results["hf"][k] for k in res if k.endswith("tok_s")}
            print(f"\n{kind} / hf: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    print(json.dumps({"bandwidth_gb_s": bandwidth, "cpu_flags": shown, "results": results}))
    return 0 if set(results) == set(args.kinds) else 1


if __name__ == "__main__":
    sys.exit(main())
