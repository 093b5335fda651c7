"""Play games with a vLLM engine at every seat (GPU) and save the episode buffer.

Needs a CUDA GPU and `pip install 'spyrl[vllm]'`:

    python examples/vllm_games.py --model Qwen/Qwen3-4B-Instruct-2507 --games 64 --out runs/vllm.parquet
"""

import argparse

import agents
from agents import SamplingParams
from spy_env import GameConfig
from spy_env.metrics import game_metrics
from spy_env.runner import Runner

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="Qwen/Qwen3-4B-Instruct-2507")
parser.add_argument("--games", type=int, default=64)
parser.add_argument("--games-per-document", type=int, default=8)
parser.add_argument("--max-new-tokens", type=int, default=2048)
parser.add_argument("--gpu-memory-utilization", type=float, default=0.85)
parser.add_argument("--out", default="runs/vllm.parquet")
args = parser.parse_args()

policy = agents.load(
    f"vllm:{args.model}",
    sampling=SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0),
    gpu_memory_utilization=args.gpu_memory_utilization,
    max_model_len=16384,
)
runner = Runner(GameConfig(), games_per_document=args.games_per_document, replay_setup=True)
buffer = runner.run([policy] * 5, args.games, seed=0, progress=True)
buffer.save(args.out)
print({k: round(v, 3) for k, v in game_metrics(buffer).items()})
