"""The presets of :class:`trainers.SpyRLConfig` (``SpyRLConfig.preset(name, **overrides)``): field values over
the defaults, with ``game`` holding :class:`spy_env.GameConfig` overrides. The list with what each is for is
in :mod:`trainers.config`'s docstring.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRESETS"]

PRESETS: dict[str, dict[str, Any]] = {
    "qwen3-4b-paper": {
        "model": "Qwen/Qwen3-4B-Instruct-2507",
        "dtype": "bfloat16",
        "gradient_checkpointing": True,
        "generation": "vllm-colocate",
        "vllm_enable_sleep_mode": True,
        "documents_per_iteration": 128,
        "games_per_document": 8,
        "document_order": "epoch",  # a data loader's epoch: 12,800 training documents, each played once
        # verl's ppo_mini_batch_size counts prompts (documents): 128 of 128 = one on-policy update per iteration
        "mini_batch_size": 128,
        "mini_batch_unit": "documents",
        "micro_batch_size": 4,
        "learning_rate": 1e-6,
        "epsilon": 0.2,
        "beta": 0.001,
        "loss_type": "dapo",  # verl's token-mean: token sum / tokens of the whole mini-batch
        "kl_estimator": "low_var_kl",  # verl's: k3 clamped to ±10, not ratio-weighted
        "spy_vote_in_group": True,
        "rae_init": "first_batch",
        "penalty_advantage": "own",
        "stage_ema": 0.5,  # 4k votes per iteration are already a precise estimate; 0.9 delayed switches ~18 its
        "heldout_fraction": 0.2,
        "iterations": 100,
        "max_prompt_tokens": 12288,
        "max_completion_tokens": 4096,
        "game": {
            "n_players": 5,
            "rounds": 1,
            "allow_self_vote": True,
            "train_spy_vote": True,  # Eq. 4/5/8 run over all n voters, v ∈ {1..n}
            "mask_placeholder": "",  # silent removal: no visible marker telling the spy (and detectors) who it is
            "corpus": "nemotron:4plus",  # streamed, gated: HF_TOKEN
            "max_documents": 16000,  # 80% train = 12,800 = 100 iterations × 128 documents
        },
        "report_to": ["jsonl", "console"],
    },
    "smollm2-cpu": {
        "model": "smollm2",
        "dtype": "float32",
        "device": "cpu",
        "documents_per_iteration": 1,
        "games_per_document": 2,
        "mini_batch_size": 10,
        "micro_batch_size": 5,
        "learning_rate": 1e-5,
        "beta": 0.001,
        "iterations": 2,
        "max_prompt_tokens": 4096,
        "max_completion_tokens": 48,
        "generation_batch_size": 20,
        "stage_schedule": "alternate",
        "k_min": 1,
        "checkpoint_every": 1,
        "game": {"n_players": 5, "max_document_chars": 1500},
        "output_dir": "runs/smollm2-cpu",
    },
    # SmolLM2 learning to detect the spy on CPU within the hour (experiments/vote_gradients.py): an eased game
    # (3 players, the spy gets no text, 600-character documents), votes constrained to a seat and played in one
    # forward pass each, only the seat token scored, one on-policy update of 8 civilian votes an iteration
    # normalised over the batch (docs/experiment/TUNING.md, "The difference").
    "smollm2-selfplay": {
        "model": "smollm2",
        "dtype": "fast",  # bf16 weights (fp32 masters) where the CPU computes bf16 natively: 2.7x votes/min
        "device": "cpu",
        "train_top_layers": 12,
        "documents_per_iteration": 4,
        "games_per_document": 1,
        "updates_per_iteration": 1,
        "micro_batch_size": 8,
        "learning_rate": 5e-5,
        "beta": 0.0,
        "iterations": 20,
        "max_prompt_tokens": 2048,
        "max_completion_tokens": 40,
        "temperature": 1.0,
        "generation_batch_size": 48,
        "vote_mode": "constrained",
        "forward_votes": True,
        "vote_gradient": "expected",
        "detect_advantage_groups": "batch",
        "answer": "boxed",
        "answer_tokens": 6,
        "stage_schedule": "detect",
        # pinned: the values the committed experiments ran with before these defaults existed
        "rae_init": "zero",
        "penalty_advantage": "shared",
        "checkpoint_every": 20,
        "game": {"n_players": 3, "degrade": "blank", "max_document_chars": 600},
        "output_dir": "runs/smollm2-selfplay",
    },
    "cpu-smoke": {
        "model": "tiny",
        "dtype": "float32",
        "device": "cpu",
        "documents_per_iteration": 4,
        "games_per_document": 4,
        "mini_batch_size": 16,
        "micro_batch_size": 8,
        "learning_rate": 1e-3,
        "beta": 0.01,
        "iterations": 4,
        "max_prompt_tokens": 4096,
        "max_completion_tokens": 16,
        "generation_batch_size": 48,
        "vote_mode": "constrained",
        "stage_schedule": "alternate",
        "k_min": 2,
        "checkpoint_every": 2,
        "game": {"n_players": 3, "max_document_chars": 800},
        "output_dir": "runs/cpu-smoke",
    },
}
