"""Seat a model served by any OpenAI-compatible server (vLLM serve, SGLang, `transformers serve`,
a hosted API) against the heuristic baseline.

    vllm serve Qwen/Qwen3-4B-Instruct-2507 --port 8000        # or any other server
    python examples/openai_server_games.py --model Qwen/Qwen3-4B-Instruct-2507 --url http://127.0.0.1:8000/v1

The API key, if the server needs one, is read from OPENAI_API_KEY.
"""

import argparse

import agents
from agents import SamplingParams
from agents.openai_compat import RequestLimits
from spy_env import GameConfig
from spyrl.evaluation.tournament import run_tournament

parser = argparse.ArgumentParser()
parser.add_argument("--model", required=True)
parser.add_argument("--url", required=True)
parser.add_argument("--games", type=int, default=50)
parser.add_argument("--out", default="runs/openai-tournament")
args = parser.parse_args()

served = agents.load(
    f"openai:{args.model}@{args.url}",
    sampling=SamplingParams(temperature=0.7, max_new_tokens=1024, seed=0),
    limits=RequestLimits(max_concurrency=32),
)
result = run_tournament({"served": served, "heuristic": agents.load("heuristic")}, args.games, config=GameConfig())
result.save(args.out)
print(result.table())
