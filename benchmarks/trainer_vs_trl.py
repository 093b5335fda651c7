"""Update throughput: SpyRL's trainer vs TRL 1.16's GRPOTrainer on the same tiny model and batch.

TRL's GRPOTrainer runs first for a few steps on a tiny Llama (CPU, fp32, loss_type grpo, β > 0 so
both sides also run a reference model); ``_generate_and_score_completions`` is timed and
subtracted (it also holds TRL's reference and behaviour log-prob passes, so TRL's update time
leaves them out while ours counts them: the comparison favours TRL), and the
exact batches it trained on (prompt ids, completion ids, advantages) are captured. SpyRL's
``SpyRLTrainer.update`` then trains a fresh copy of the same model on exactly those batches with
the same micro-batch, accumulation, learning rate, ε and β. Both report completion tokens trained
per second of update time, alternately over ``--reps`` rounds; the script prints both and the
ratio (spyrl / trl).

    python benchmarks/trainer_vs_trl.py [--steps 8] [--reps 2]
    python benchmarks/trainer_vs_trl.py --smoke    # one short round: checks the path, not the speed
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch


def run_trl(model_path: str, out_dir: str, args) -> tuple[float, int, list[dict]]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    prompts = [f"Problem {i}: a bakery sells {i + 3} trays of {2 * i + 5} muffins. Solve it." for i in range(64)]
    dataset = Dataset.from_dict({"prompt": prompts})

    def reward(completions, **kwargs):  # any varied reward: advantages must not vanish
        return [float(len(c) % 7) for c in completions]

    config = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=args.micro,
        gradient_accumulation_steps=args.accumulation,
        num_generations=args.generations,
        max_completion_length=args.completion_tokens,
        max_steps=args.steps,
        learning_rate=1e-5,
        beta=0.001,
        epsilon=0.2,
        loss_type="grpo",
        temperature=1.0,
        logging_steps=1000,
        save_strategy="no",
        report_to=[],
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model_path, reward_funcs=reward, args=config, train_dataset=dataset)
    batches: list[dict] = []
    generation_seconds = 0.0
    original = trainer._generate_and_score_completions

    def timed(*a, **k):
        nonlocal generation_seconds
        start = time.perf_counter()
        out = original(*a, **k)
        generation_seconds += time.perf_counter() - start
        batches.append({key: value.detach().clone() for key, value in out.items() if torch.is_tensor(value)})
        return out

    trainer._generate_and_score_completions = timed
    start = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - start
    tokens = int(sum(b["completion_mask"].sum() for b in batches))
    return total - generation_seconds, tokens, batches


def rows_from(batches: list[dict]) -> list:
    """TRL's generation batches as the trainer's samples (buffer-row fields and the advantage TRL computed)."""
    from trainers.samples import Sample

    rows = []
    for b in batches:
        for i in range(b["prompt_ids"].shape[0]):
            prompt = b["prompt_ids"][i][b["prompt_mask"][i].bool()].tolist()
            completion = b["completion_ids"][i][b["completion_mask"][i].bool()].tolist()
            if completion:
                row = {"prompt_token_ids": prompt, "completion_token_ids": completion}
                rows.append(Sample(row, float(b["advantages"][i])))
    return rows


def run_spyrl(model_path: str, out_dir: str, rows: list, args) -> tuple[float, int]:
    from trainers import SpyRLConfig
    from trainers.grpo import SpyRLTrainer

    batch = args.micro * args.accumulation
    config = SpyRLConfig.from_dict(
        {
            "model": {"name_or_path": model_path, "device": "cpu", "dtype": "float32"},
            "update": {"learning_rate": 1e-5, "mini_batch_size": batch, "micro_batch_size": args.micro},
            "loss": {"beta": 0.001, "epsilon": 0.2, "loss_type": "grpo"},
            "decoding": {"max_completion_tokens": args.completion_tokens},
            "run": {"output_dir": out_dir, "report_to": [], "seed": 0, "progress": False},
        }
    )
    trainer = SpyRLTrainer(config)
    start = time.perf_counter()
    tokens = 0
    for k in range(0, len(rows), batch):  # one generation batch at a time, as TRL trained them
        stats = trainer.update(rows[k : k + batch], "perform")
        tokens += stats["perf/update_tokens"]
    return time.perf_counter() - start, tokens


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="TRL optimizer steps")
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--accumulation", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--completion-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="one round of 2 steps on a smaller batch")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.micro, args.accumulation, args.generations, args.completion_tokens = 2, 4, 1, 4, 8
        args.reps = 1
    torch.manual_seed(0)

    from agents.tiny import build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="spyrl-timing-"))
    model_path = str(build_tiny_model(work / "tiny", hidden_size=128, num_layers=4, num_heads=4))
    trl_rates, ours_rates = [], []
    for rep in range(args.reps):
        trl_seconds, trl_tokens, batches = run_trl(model_path, str(work / f"trl{rep}"), args)
        rows = rows_from(batches)
        ours_seconds, ours_tokens = run_spyrl(model_path, str(work / f"ours{rep}"), rows, args)
        trl_rates.append(trl_tokens / trl_seconds)
        ours_rates.append(ours_tokens / ours_seconds)
        print(f"rep {rep}: TRL {trl_tokens} tokens in {trl_seconds:.2f}s update time; "
              f"spyrl {ours_tokens} tokens in {ours_seconds:.2f}s")  # fmt: skip
    trl, ours = max(trl_rates), max(ours_rates)
    print(f"TRL GRPOTrainer update : {trl:9.1f} tokens/s")
    print(f"spyrl SpyRLTrainer     : {ours:9.1f} tokens/s")
    print(f"ratio spyrl / TRL      = {ours / trl:.2f} (target >= 1.0)")


if __name__ == "__main__":
    main()
