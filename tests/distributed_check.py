"""Run under ``python -m torch.distributed.run --nproc_per_node N`` by tests (CPU, gloo): what training does
on N processes, written by rank 0 as safetensors for the test to compare with N = 1.

- ``precision DTYPE OUT``: a tiny Llama (N(0, 0.02) weights) in DTYPE, wrapped by accelerate (DDP when
  N > 1), three steps of the trainer's optimizer (:class:`trainers.precision.MasterAdamW`) at lr 1e-6;
  writes the initial and final fp32 weights training holds.
- ``update OUT``: a ``cpu-smoke`` :class:`~trainers.SpyRLTrainer` (4 documents per iteration, epoch
  order) plays one iteration's rollouts, then updates on the same 16 fixed vote rows split over the
  processes; writes the fp32 weights before and after the update and the ids of the documents every process played.
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


def update(out: str) -> None:
    from safetensors.torch import save_file

    from trainers import SpyRLConfig, SpyRLTrainer
    from trainers.precision import fp32_weights

    with tempfile.TemporaryDirectory() as tmp:
        config = SpyRLConfig.preset(
            "cpu-smoke", output_dir=tmp, documents_per_iteration=4, games_per_document=1, document_order="epoch",
            loss_type="dapo", mini_batch_unit="documents", mini_batch_size=4, micro_batch_size=4, beta=0.0,
            learning_rate=1e-3, keep_buffers=False, progress=False, report_to=[],
        )  # fmt: skip
        trainer = SpyRLTrainer(config)
        before = [p.detach().float().clone() for p in trainer.unwrapped.parameters()]
        buffer = trainer.rollouts()
        played = sorted({r["document_id"] for r in buffer})
        rows = fixed_samples()
        share = len(rows) // trainer.accelerator.num_processes
        trainer.update(rows[trainer.rank * share : (trainer.rank + 1) * share], "detect")
        weights = fp32_weights(trainer.optimizer, trainer.unwrapped.parameters())
        documents = [None] * trainer.accelerator.num_processes
        if trainer.distributed:
            torch.distributed.all_gather_object(documents, played)
        else:
            documents = [played]
        if trainer.accelerator.is_main_process:
            names = [n for n, _ in trainer.unwrapped.named_parameters()]
            tensors = {n: w.contiguous() for n, w in zip(names, weights, strict=True)}
            tensors.update({f"before.{n}": b for n, b in zip(names, before, strict=True)})
            save_file(tensors, out, metadata={"documents": json.dumps(documents)})


if __name__ == "__main__":
    if sys.argv[1] == "precision":
        precision(sys.argv[2], sys.argv[3])
    else:
        update(sys.argv[2])
