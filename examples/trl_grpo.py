"""Teach a model to catch the spy with TRL's GRPOTrainer, on CPU (pip install 'spyrl[trl]')."""

from trl import GRPOConfig, GRPOTrainer

from agents.smollm2 import converted_path  # SmolLM2-135M-Instruct, offline; any model id works
from spy_env import GameConfig
from spyrl.integrations.trl import DetectionReward, detection_dataset

model, game = str(converted_path()), GameConfig(n_players=3, max_document_chars=400)  # 3 players: short prompts
config = dict(max_steps=2, per_device_train_batch_size=4, num_generations=4, max_completion_length=6, logging_steps=1)
config.update(use_cpu=True, report_to=[])  # log_completions=True also prints each completion with its reward
# civilians' vote prompts from heuristic agents' games, each ending in "<vote>" so the model answers at once
dataset = detection_dataset(game, num_games=4, prefill_vote=True, tokenizer=model)
trainer = GRPOTrainer(model, DetectionReward(game), GRPOConfig("runs/trl-grpo", **config), dataset)
trainer.train()
