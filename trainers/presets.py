"""The presets of :class:`trainers.SpyRLConfig` (``SpyRLConfig.preset(name, **overrides)``): per section, the
values that differ from the defaults, each by its flat name or inside its own section (``game`` holds
:class:`spy_env.GameConfig` settings by flat name; ``rollout.vllm`` its block). The list with what each is for
is in :mod:`trainers.config`'s docstring.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRESETS"]

PRESETS: dict[str, dict[str, Any]] = {
    "qwen3-4b-paper": {
        "game": {
            "n_players": 5,
            "rounds": 1,
            "allow_self_vote": True,
            "train_spy_vote": True,  # Eq. 4/5/8 run over all n voters, v ∈ {1..n}
            "mask_placeholder": "",  # silent removal: no visible marker telling the spy (and detectors) who it is
            "corpus": "nemotron:4plus",  # streamed, gated: HF_TOKEN
            "max_documents": 16000,  # 80% train = 12,800 = 100 iterations × 128 documents
        },
        "model": {
            "name_or_path": "Qwen/Qwen3-4B-Instruct-2507",
            "dtype": "bfloat16",
            "gradient_checkpointing": True,
        },
        "rollout": {
            "generation": "vllm-colocate",
            "vllm": {"enable_sleep_mode": True},  # the engine's memory freed between rollouts
            "documents_per_iteration": 128,
            "games_per_document": 8,
            "document_order": "epoch",  # a data loader's epoch: 12,800 training documents, each played once
            "max_prompt_tokens": 12288,
        },
        "decoding": {
            "max_completion_tokens": 4096,
        },
        "update": {
            # verl's ppo_mini_batch_size counts prompts (documents): 128 of 128 = one on-policy update per iteration
            "mini_batch_size": 128,
            "mini_batch_unit": "documents",
            "micro_batch_size": 4,
            "learning_rate": 1e-6,
        },
        "loss": {
            "epsilon": 0.2,
            "beta": 0.001,
            "loss_type": "dapo",  # verl's token-mean: token sum / tokens of the whole mini-batch
            "kl_estimator": "low_var_kl",  # verl's: k3 clamped to ±10, not ratio-weighted
        },
        "advantages": {
            "spy_vote_in_group": True,
            "rae_init": "first_batch",
            "penalty_advantage": "own",
        },
        "stages": {
            "stage_ema": 0.5,  # 4k votes per iteration are already a precise estimate; 0.9 delayed switches ~18 its
        },
        "run": {
            "heldout_fraction": 0.2,
            "iterations": 100,
            "report_to": ["jsonl", "console"],
        },
    },
    "smollm2-cpu": {
        "game": {"n_players": 5, "max_document_chars": 1500},
        "model": {
            "name_or_path": "smollm2",
            "dtype": "float32",
            "device": "cpu",
        },
        "rollout": {
            "documents_per_iteration": 1,
            "games_per_document": 2,
            "max_prompt_tokens": 4096,
            "generation_batch_size": 20,
        },
        "decoding": {
            "max_completion_tokens": 48,
        },
        "update": {
            "mini_batch_size": 10,
            "micro_batch_size": 5,
            "learning_rate": 1e-5,
        },
        "loss": {
            "beta": 0.001,
        },
        "stages": {
            "stage_schedule": "alternate",
            "k_min": 1,
        },
        "run": {
            "iterations": 2,
            "checkpoint_every": 1,
            "output_dir": "runs/smollm2-cpu",
        },
    },
    # SmolLM2 learning to detect the spy on CPU within the hour: an eased game
    # (3 players, the spy gets no text, 600-character documents), votes constrained to a seat and played in one
    # forward pass each, only the seat token scored, one on-policy update of 8 civilian votes an iteration
    # normalised over the batch.
    "smollm2-selfplay": {
        "game": {"n_players": 3, "degrade": "blank", "max_document_chars": 600},
        "model": {
            "name_or_path": "smollm2",
            "dtype": "fast",  # bf16 weights (fp32 masters) where the CPU computes bf16 natively: 2.7x votes/min
            "device": "cpu",
            "train_top_layers": 12,
        },
        "rollout": {
            "documents_per_iteration": 4,
            "games_per_document": 1,
            "max_prompt_tokens": 2048,
            "generation_batch_size": 48,
            "forward_votes": True,
        },
        "decoding": {
            "max_completion_tokens": 40,
            "temperature": 1.0,
            "vote_mode": "constrained",
            "answer": "boxed",
            "answer_tokens": 6,
        },
        "update": {
            "updates_per_iteration": 1,
            "micro_batch_size": 8,
            "learning_rate": 5e-5,
        },
        "loss": {
            "beta": 0.0,
        },
        "advantages": {
            "vote_gradient": "expected",
            "detect_advantage_groups": "batch",
            # pinned: the values the committed experiments ran with before these defaults existed
            "rae_init": "zero",
            "penalty_advantage": "shared",
        },
        "stages": {
            "stage_schedule": "detect",
        },
        "run": {
            "iterations": 20,
            "checkpoint_every": 20,
            "output_dir": "runs/smollm2-selfplay",
        },
    },
    "cpu-smoke": {
        "game": {"n_players": 3, "max_document_chars": 800},
        "model": {
            "name_or_path": "tiny",
            "dtype": "float32",
            "device": "cpu",
        },
        "rollout": {
            "documents_per_iteration": 4,
            "games_per_document": 4,
            "max_prompt_tokens": 4096,
            "generation_batch_size": 48,
        },
        "decoding": {
            "max_completion_tokens": 16,
            "vote_mode": "constrained",
        },
        "update": {
            "mini_batch_size": 16,
            "micro_batch_size": 8,
            "learning_rate": 1e-3,
        },
        "loss": {
            "beta": 0.01,
        },
        "stages": {
            "stage_schedule": "alternate",
            "k_min": 2,
        },
        "run": {
            "iterations": 4,
            "checkpoint_every": 2,
            "output_dir": "runs/cpu-smoke",
        },
    },
}
