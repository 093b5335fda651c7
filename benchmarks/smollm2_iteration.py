"""One SpyRL iteration on SmolLM2 (CPU) against the pure compute of the same work, side by side.

The iteration (``SpyRLTrainer.train_iteration``: rollouts of both stages, sample selection,
advantages, the update, bookkeeping) is timed with its parts. Then, on the same model and the
same iteration's buffer, the *pure compute* of that work is timed:

- raw ``model.generate`` on the same prompts, per stage, in batches of the same size, producing
  as many new tokens as the rollout's longest completion of that stage (no early stop);
- one forward and backward pass over the same training samples (micro-batches of the same size,
  the same trainable parameters), the least an update can cost.

Prints both and the ratio iteration ÷ pure compute (goal ≤ 1.2). Run on a quiet machine:

    python benchmarks/smollm2_iteration.py
    python benchmarks/smollm2_iteration.py --set performer=heuristic --documents 8
    python benchmarks/smollm2_iteration.py --smoke   # the preset on a tiny random model, one game: checks the path
    python benchmarks/smollm2_iteration.py --iteration-only --set rollout.generation=vllm-colocate   # vLLM rollouts
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import torch


def raw_generate(model, prompts, new_tokens: int, batch_size: int, pad_id: int) -> None:
    """Plain left-padded sampling with ``new_tokens`` new tokens per prompt (no processors)."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    for start in range(0, len(order), batch_size):
        chunk = [prompts[i] for i in order[start : start + batch_size]]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, p in enumerate(chunk):
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        with torch.inference_mode():
            model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                pad_token_id=pad_id,
            )


def smoke(args: argparse.Namespace, out: str) -> None:
    """--smoke: the preset on a tiny random model (two heads of 32), one game, short replies."""
    from agents.tiny import build_tiny_model

    args.documents, args.games_per_document = 1, 1
    tiny = build_tiny_model(f"{out}/tiny", hidden_size=64, num_layers=2, num_heads=2)
    args.set = [f"model.name_or_path={tiny}", "model.train_top_layers=1", "decoding.max_completion_tokens=24",
                "decoding.think_tokens=4", *args.set]  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--documents", type=int, default=4, help="documents per iteration")
    p.add_argument("--games-per-document", type=int, default=2)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="SpyRLConfig override")
    p.add_argument("--smoke", action="store_true", help="a tiny random model, one game, short replies")
    p.add_argument("--iteration-only", action="store_true", help="time the trainer's start-up and iteration only")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from trainers import SpyRLConfig, SpyRLTrainer

    args = parse_args(argv)
    out = tempfile.mkdtemp(prefix="smollm2-iteration-")
    if args.smoke:
        smoke(args, out)
    config = SpyRLConfig.preset(
        "smollm2-selfplay", output_dir=out, iterations=1, documents_per_iteration=args.documents,
        games_per_document=args.games_per_document, progress=False, keep_buffers=True,
    ).with_overrides(args.set)  # fmt: skip
    start = time.perf_counter()
    trainer = SpyRLTrainer(config)  # with rollout.generation=vllm-colocate: the engine starts here
    print(f"start-up          {time.perf_counter() - start:8.1f} s  (generation {config.rollout.generation})")
    with torch.inference_mode():  # warm-up, so neither side pays first-call costs
        trainer.unwrapped(torch.tensor([[1, 2, 3, 4]]))

    start = time.perf_counter()
    metrics = trainer.train_iteration()
    iteration = time.perf_counter() - start
    if args.iteration_only:
        print(
            f"samples trained: {int(metrics['samples/count'])} ({metrics['stage']}), games: {int(metrics['env/games'])}"
        )
        print(f"iteration         {iteration:8.1f} s  (rollouts {metrics['time/rollout_seconds']:.1f} s, "
              f"update {metrics['time/update_seconds']:.1f} s)")  # fmt: skip
        return 0

    rows, generate, backward = pure_compute(trainer, f"{out}/buffers/iter_00000.parquet", metrics["stage"])
    pure = generate + backward
    print(f"samples trained: {len(rows)} ({metrics['stage']}), games: {int(metrics['env/games'])}")
    print(f"iteration         {iteration:8.1f} s  (rollouts {metrics['time/rollout_seconds']:.1f} s, "
          f"update {metrics['time/update_seconds']:.1f} s)")  # fmt: skip
    print(f"pure compute      {pure:8.1f} s  (raw generate {generate:.1f} s, forward+backward {backward:.1f} s)")
    print(f"ratio iteration / pure compute: {iteration / pure:.2f}  (goal <= 1.2)")
    return 0


def pure_compute(trainer, buffer_path: str, stage: str) -> tuple[list, float, float]:
    """The least the iteration's work costs: (its samples, raw generate seconds, forward+backward seconds)."""
    from spy_env.buffer import EpisodeBuffer
    from trainers.logprobs import sequence_logps

    config, model, pad = trainer.config, trainer.unwrapped, trainer.pad_id
    buffer = list(EpisodeBuffer.load(buffer_path))
    rows = [s.row for s in trainer.select_samples(buffer, stage)[0]]
    start = time.perf_counter()
    for kind in ("perform", "vote"):
        llm = [r for r in buffer if r["stage"] == kind and r["completion_token_ids"]]
        if llm:
            longest = max(len(r["completion_token_ids"]) for r in llm)
            raw_generate(
                model, [list(r["prompt_token_ids"]) for r in llm], longest, config.rollout.generation_batch_size, pad
            )
    generate = time.perf_counter() - start
    start = time.perf_counter()
    model.train()
    for i in range(0, len(rows), config.update.micro_batch_size):
        micro = rows[i : i + config.update.micro_batch_size]
        logps, mask, *_ = sequence_logps(
            model, [list(r["prompt_token_ids"]) for r in micro], [list(r["completion_token_ids"]) for r in micro], pad
        )
        ((logps * mask).sum() / mask.sum()).backward()
    model.zero_grad(set_to_none=True)
    model.eval()
    backward = time.perf_counter() - start
    return rows, generate, backward


if __name__ == "__main__":
    sys.exit(main())
