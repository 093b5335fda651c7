"""Run under ``python -m torch.distributed.run --nproc_per_node N`` by tests (CPU, gloo): what training does
on N processes, written by rank 0 as safetensors for the test to compare with N = 1.

- ``precision DTYPE OUT``: a tiny Llama (N(0, 0.02) weights) in DTYPE, wrapped by accelerate (DDP when
  N > 1), three steps of the trainer's optimizer (:class:`trainers.precision.MasterAdamW`) at lr 1e-6;
  writes the initial and final fp32 weights training holds.
- ``update OUT``: a ``cpu-smoke`` :class:`~trainers.SpyRLTrainer` (4 documents per iteration, epoch
  order) plays one iteration's rollouts, then updates on the same 16 fixed vote rows split over the
  processes; writes the fp32 weights before and after the update, the gradient the optimizer step
  received (after DDP's all-reduce, before clipping), the ids of the documents every process played, and
  the advantages ``select_samples`` gives 8 fixed vote rows (split over the processes) with ``batch`` groups.
"""

from __future__ import annotations

import json
import sys
import tempfile

import torch

if __name__ == "__main__":  # run as a script: the repository root first on the path
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))


def tiny_llama(dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, initializer_range=0.02,
    )  # fmt: skip
    return LlamaForCausalLM(config).to(dtype)


def precision(dtype_name: str, out: str) -> None:
    from accelerate import Accelerator
    from safetensors.torch import save_file

    from trainers.precision import MasterAdamW, fp32_weights

    accelerator = Accelerator(cpu=True)
    model = tiny_llama(getattr(torch, dtype_name))
    names = [n for n, _ in model.named_parameters()]
    before = [p.detach().float().clone() for p in model.parameters()]
    optimizer = MasterAdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    model, optimizer = accelerator.prepare(model, optimizer)
    g = torch.Generator().manual_seed(1 + accelerator.process_index)
    for _ in range(3):
        ids = torch.randint(0, 128, (4, 12), generator=g)
        loss = model(input_ids=ids, labels=ids).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    after = fp32_weights(optimizer, accelerator.unwrap_model(model).parameters())
    replicas = accelerator.gather(torch.stack([a.double().sum() for a in after]).unsqueeze(0))
    if accelerator.is_main_process:
        tensors = {f"before.{n}": b for n, b in zip(names, before, strict=True)}
        tensors.update({f"after.{n}": a.contiguous() for n, a in zip(names, after, strict=True)})
        tensors["replica_spread"] = (replicas.max(0).values - replicas.min(0).values).float()
        save_file(tensors, out)


def fixed_samples(n: int = 16) -> list:
    """Vote samples with fixed token ids and advantages (the same on every process)."""
    from trainers.samples import Sample

    g = torch.Generator().manual_seed(7)
    rows = []
    for _ in range(n):
        length = int(torch.randint(1, 6, (1,), generator=g))
        row = {
            "prompt_token_ids": torch.randint(5, 200, (10,), generator=g).tolist(),
            "completion_token_ids": torch.randint(5, 200, (length,), generator=g).tolist(),
        }
        rows.append(Sample(row, float(torch.randn(1, generator=g))))
    return rows


def batch_votes(n: int = 8) -> list[dict]:
    """Vote rows of ``n`` games (one civilian vote each) whose rewards differ between the two halves."""
    rewards = [1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0][:n]
    return [
        {"stage": "vote", "trainable": True, "role": "civilian", "error": None, "prompt_token_ids": [5, 6, 7],
         "completion_token_ids": [9], "completion_mask": None, "reward_detect": r, "reward_penalty": 0.0,
         "reward": r, "game_id": i, "group_id": i, "seat": 0, "round": 0}
        for i, r in enumerate(rewards)
    ]  # fmt: skip


def recording_gradients(trainer) -> list:
    """Wrap the trainer's gradient clipping so each step's gradients (already averaged over processes) are
    kept before clipping; returns the list they are appended to."""
    seen = []
    clip = trainer.accelerator.clip_grad_norm_

    def record(parameters, max_norm, *args, **kwargs):
        parameters = list(parameters)
        seen.append([torch.zeros_like(p, dtype=torch.float32) if p.grad is None else p.grad.detach().float().clone()
                     for p in parameters])  # fmt: skip
        return clip(parameters, max_norm, *args, **kwargs)

    trainer.accelerator.clip_grad_norm_ = record
    return seen


def update(out: str) -> None:
    from safetensors.torch import save_file

    from trainers import SpyRLConfig, SpyRLTrainer
    from trainers.precision import fp32_weights

    with tempfile.TemporaryDirectory() as tmp:
        config = SpyRLConfig.preset(
            "cpu-smoke", output_dir=tmp, documents_per_iteration=4, games_per_document=1, document_order="epoch",
            loss_type="dapo", mini_batch_unit="documents", mini_batch_size=4, micro_batch_size=4, beta=0.0,
            learning_rate=1e-3, keep_buffers=False, progress=False, report_to=[], detect_advantage_groups="batch",
        )  # fmt: skip
        trainer = SpyRLTrainer(config)
        processes = trainer.accelerator.num_processes
        before = [p.detach().float().clone() for p in trainer.unwrapped.parameters()]
        buffer = trainer.rollouts()
        played = sorted({r["document_id"] for r in buffer})
        votes = batch_votes()
        vote_share = len(votes) // processes
        selected, _ = trainer.select_samples(
            votes[trainer.rank * vote_share : (trainer.rank + 1) * vote_share], "detect"
        )
        advantages = {s.row["game_id"]: s.advantage for s in selected}
        rows = fixed_samples()
        share = len(rows) // processes
        gradients = recording_gradients(trainer)
        trainer.update(rows[trainer.rank * share : (trainer.rank + 1) * share], "detect")
        weights = fp32_weights(trainer.optimizer, trainer.unwrapped.parameters())
        documents, gathered = [None] * processes, [None] * processes
        if trainer.distributed:
            torch.distributed.all_gather_object(documents, played)
            torch.distributed.all_gather_object(gathered, advantages)
        else:
            documents, gathered = [played], [advantages]
        if trainer.accelerator.is_main_process:
            names = [n for n, _ in trainer.unwrapped.named_parameters()]
            tensors = {n: w.contiguous() for n, w in zip(names, weights, strict=True)}
            tensors.update({f"before.{n}": b for n, b in zip(names, before, strict=True)})
            (step,) = gradients  # one optimizer step
            tensors.update({f"grad.{n}": g.contiguous() for n, g in zip(names, step, strict=True)})
            batch = {str(k): v for part in gathered for k, v in part.items()}
            save_file(
                tensors, out, metadata={"documents": json.dumps(documents), "batch_advantages": json.dumps(batch)}
            )


if __name__ == "__main__":
    if sys.argv[1] == "precision":
        precision(sys.argv[2], sys.argv[3])
    else:
        update(sys.argv[2])
