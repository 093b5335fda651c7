"""Train a model by live self-play with TRL's GRPOTrainer, on CPU (pip install 'spyrl[trl]').

SelfPlayRollout is TRL's rollout_func: for each prompt group it plays a real game with the model being
trained in every seat (performances and votes sampled live), and the group's completions are one civilian
seat's votes, each rewarded by the environment (1 for catching the spy, penalties for invalid votes).
TRL logs the reward (`rewards/selfplay/mean`) and, apart, how often the votes caught the spy
(`rewards/caught/mean`) and how often each rule baseline would have on the same games
(`rewards/rule_<name>/mean`): metrics of weight 0, reported and not trained on.
No checkpoint is written unless you pass --save.

    python examples/trl_grpo.py [--save] [--steps 8] [--model PATH_OR_ID]
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

parser = argparse.ArgumentParser(description="live self-play through TRL's GRPOTrainer")
parser.add_argument("--save", action="store_true", help="save the trained model to runs/trl-grpo/final")
parser.add_argument("--steps", type=int, default=8, help="optimizer steps, one game and seat each")
parser.add_argument("--model", default=None, help="model path or id (default: the offline SmolLM2-135M-Instruct)")
args = parser.parse_args()

model, game = args.model or str(converted_path()), GameConfig(n_players=3, max_document_chars=300)  # short prompts
config = dict(per_device_train_batch_size=8, num_generations=8, max_completion_length=6, logging_steps=1)
config.update(max_steps=args.steps, learning_rate=1e-5, use_cpu=True, report_to=[], save_strategy="no", seed=0)
rewards = [selfplay_reward, selfplay_caught, *selfplay_rule_baselines()]  # all but the first: logged only
config.update(reward_weights=[1.0] + [0.0] * (len(rewards) - 1))
dataset = selfplay_dataset(game, num_games=args.steps, stages=("vote",))  # each civilian seat's vote in game g
rollout = SelfPlayRollout(game, perform_tokens=48, vote_tokens=6)  # votes start with "<vote>" already written
trainer = GRPOTrainer(model, rewards, GRPOConfig("runs/trl-grpo", **config), dataset, rollout_func=rollout)
trainer.train()
if args.save:
    trainer.save_model("runs/trl-grpo/final")
