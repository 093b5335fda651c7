"""Train a model by live self-play with TRL's GRPOTrainer, on CPU (pip install 'spyrl[trl]').

SelfPlayRollout is TRL's rollout_func: for each prompt group it plays a real game with the model being
trained in every seat (performances and votes sampled live), and the group's completions are one seat's
votes, each rewarded by the environment (1 for catching the spy, penalties for invalid votes).
No checkpoint is written unless you pass --save.
"""

import sys

from trl import GRPOConfig, GRPOTrainer

from agents.smollm2 import converted_path  # SmolLM2-135M-Instruct, offline; any model id works
from spy_env import GameConfig
from spyrl.integrations.trl import SelfPlayRollout, selfplay_dataset, selfplay_reward

model, game = str(converted_path()), GameConfig(n_players=3, max_document_chars=300)  # 3 players: short prompts
config = dict(max_steps=6, per_device_train_batch_size=4, num_generations=4, max_completion_length=6, logging_steps=1)
config.update(learning_rate=1e-5, use_cpu=True, report_to=[], save_strategy="no", seed=0)
dataset = selfplay_dataset(game, num_games=6, stages=("vote",), seats=[0])  # game g, seat 1, its vote
rollout = SelfPlayRollout(game, perform_tokens=48, vote_tokens=6)  # votes start with "<vote>" already written
trainer = GRPOTrainer(model, selfplay_reward, GRPOConfig("runs/trl-grpo", **config), dataset, rollout_func=rollout)
trainer.train()
if "--save" in sys.argv:
    trainer.save_model("runs/trl-grpo/final")
