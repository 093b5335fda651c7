"""One game through verifiers: every seat an agent of role spy or civilian (pip install 'spyrl[verifiers]').

python examples/verifiers_episode.py http://127.0.0.1:8000/v1 MODEL   # any OpenAI-compatible server
"""

import asyncio
import os
import sys

import verifiers.v1 as vf
from verifiers.v1.utils.loaders import load_environment

from spyrl.integrations.verifiers import SpyEnvConfig

base_url, model = sys.argv[1], sys.argv[2]
os.environ.setdefault("OPENAI_API_KEY", "none")  # a local server takes any key
env = load_environment(SpyEnvConfig(taskset={"id": "spyrl-game", "n_players": 4, "num_games": 1}))
client = vf.EvalClientConfig(base_url=base_url, api_key_var="OPENAI_API_KEY")
ctx = vf.ModelContext(model=model, client=client, sampling=vf.SamplingConfig(max_tokens=64))


async def main():
    async with env.serving():
        return await env.run_episode(next(iter(env.taskset)), ctx)


episode = asyncio.run(main())
print("episode ok:", episode.ok, "| errors:", [e.message for e in episode.errors])
for trace in sorted(episode.traces, key=lambda t: t.metrics["seat"]):
    reply = next((n.message.content for n in trace.nodes if n.sampled), "")
    parts = {name: round(r.score, 3) for name, r in trace.rewards.items()}
    print(f"seat {int(trace.metrics['seat']) + 1} {trace.agent.name:9} reward {trace.reward:+.3f} {parts}")
    print(f"   first reply: {reply[:90]!r}")
