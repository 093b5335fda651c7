"""Rollout overhead: the batched runner with the ``hf`` backend vs raw batched ``model.generate``.

Both sides generate with SmolLM2-135M-Instruct (a real model, so generation dominates as it
does in practice) on exactly the same prompt token ids, in the same length-sorted chunks of
``--batch-size``, with the same sampling settings and seeds, so they produce the same tokens.
The runner side additionally renders prompts, applies the chat template, records per-token
logprobs and steps the games. The two are timed alternately in one process; the script prints
generated tokens/s of both and their ratio (runner / raw).

    python benchmarks/rollout_overhead.py [--games 2] [--max-new-tokens 48] [--reps 2] [--model smollm2]
    python benchmarks/rollout_overhead.py --smoke   # a tiny random model, one short game: checks the path
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

import agents
from agents import SamplingParams
from spy_env import GameConfig
from spy_env.runner import Runner
from spy_env.stage import Stage


def raw_generate(policy, prompts: list[list[int]], call_index: int) -> int:
    """The same batches through plain ``model.generate``; returns generated tokens (to EOS)."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    tokens = 0
    for start in range(0, len(order), policy.batch_size):
        chunk = [prompts[i] for i in order[start : start + policy.batch_size]]
        width = max(len(p) for p in chunk)
        input_ids = torch.full((len(chunk), width), policy.pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, prompt in enumerate(chunk):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
            attention_mask[row, width - len(prompt) :] = 1
        torch.manual_seed(policy.sampling.seed + call_index)
        call_index += 1
        with torch.inference_mode():
            out = policy.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=policy._generation_config(policy.sampling),
            )
        for row in out[:, width:].tolist():
            stop = next((i for i, t in enumerate(row) if t in policy.eos_ids), None)
            tokens += len(row) if stop is None else stop + 1
    return tokens


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=2)
    parser.add_argument("--players", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--model", default="smollm2", help="smollm2, tiny (a random model built here) or a model folder"
    )
    parser.add_argument("--smoke", action="store_true", help="the tiny model, one 3-player game, 8 tokens, one rep")
    args = parser.parse_args(argv)
    if args.smoke:
        args.model, args.games, args.players, args.max_new_tokens, args.reps = "tiny", 1, 3, 8, 1
    from agents.models import resolve_model_path

    model = resolve_model_path(args.model, tiny_dir=tempfile.mkdtemp(prefix="rollout-overhead-"))
    spec = "smollm2" if args.model == "smollm2" else f"hf:{model}"

    batch = args.games * args.players  # one chunk per stage, as a GRPO rollout would batch it
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed)
    policy = agents.load(spec, sampling=sampling, batch_size=batch, dtype="float32", device="cpu")
    config = GameConfig(n_players=args.players)

    # Warm-up outside the timings: first-call allocations and kernel selection.
    policy.act([{"system": "", "prompt": "Warm up.", "stage": 0}])

    timings = {"runner": [], "raw": []}
    tokens = {}
    for rep in range(args.reps):
        policy.restart_sampling(args.seed)
        start = time.perf_counter()
        buffer = Runner(config).run([policy] * args.players, args.games, seed=args.seed)
        timings["runner"].append(time.perf_counter() - start)
        tokens["runner"] = sum(len(r["completion_token_ids"]) for r in buffer)
        stages = [
            [r["prompt_token_ids"] for r in buffer if r["stage"] == stage] for stage in (Stage.PERFORM, Stage.VOTE)
        ]
        start = time.perf_counter()
        tokens["raw"] = sum(raw_generate(policy, prompts, call) for call, prompts in enumerate(stages))
        timings["raw"].append(time.perf_counter() - start)
        print(f"rep {rep}: runner {timings['runner'][-1]:.2f}s, raw generate {timings['raw'][-1]:.2f}s")

    rate = {k: tokens[k] / min(timings[k]) for k in timings}
    print(f"generated tokens: runner {tokens['runner']}, raw {tokens['raw']} (same prompts, seeds, batch {batch})")
    print(f"runner + hf backend : {rate['runner']:8.1f} tokens/s")
    print(f"raw model.generate  : {rate['raw']:8.1f} tokens/s")
    print(f"ratio runner / raw  = {rate['runner'] / rate['raw']:.3f} (target >= 0.9)")


if __name__ == "__main__":
    main()
