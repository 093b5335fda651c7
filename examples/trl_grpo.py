"""Teach a model to catch the spy with TRL's GRPOTrainer, on CPU (pip install 'spyrl[trl]')."""

from trl import GRPOConfig, GRPOTrainer

from agents.smollm2 import converted_path  # SmolLM2-135M-Instruct, offline; any model id works
from spy_env import GameConfig
from spyrl.integrations.trl import DetectionReward, detection_dataset

game = GameConfig(n_players=3, max_document_chars=700)  # short prompts for a CPU; the default is 5 players
config = dict(max_steps=3, num_generations=4, max_completion_length=24, logging_steps=1, use_cpu=True, report_to=[])
dataset = detection_dataset(game, num_games=8)  # civilians' vote prompts from games of heuristic agents
trainer = GRPOTrainer(str(converted_path()), DetectionReward(game), GRPOConfig("runs/trl-grpo", **config), dataset)
trainer.train()
