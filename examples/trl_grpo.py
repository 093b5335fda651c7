"""Teach a model to catch the spy with TRL's GRPOTrainer, on CPU (pip install 'spyrl[trl]')."""

from trl import GRPOConfig, GRPOTrainer

from agents.smollm2 import converted_path  # SmolLM2-135M-Instruct, offline; any model id works
from spyrl.integrations.trl import detection_dataset, detection_reward

config = dict(max_steps=4, num_generations=4, max_completion_length=32, logging_steps=1, use_cpu=True, report_to=[])
dataset = detection_dataset(num_games=8)  # civilians' vote prompts from games of heuristic agents
trainer = GRPOTrainer(str(converted_path()), detection_reward, GRPOConfig("runs/trl-grpo", **config), dataset)
trainer.train()
