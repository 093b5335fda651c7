"""Play one seat of a game served by OpenEnv (pip install 'spyrl[openenv]').

spyrl serve --host 127.0.0.1 --port 8000 --seats heuristic &
python examples/openenv_client.py http://127.0.0.1:8000
"""

import sys

from openenv.core import GenericEnvClient

from spy_env import Stage


def respond(observation: dict) -> str:
    """Your model goes here: it reads ``observation["messages"]`` and writes the text. This one is a fixed rule."""
    if Stage.of(observation["stage"]) is Stage.PERFORM:
        return "Problem: what is $2 + 3$?\nSolution: $2 + 3 = 5$, so $\\boxed{5}$."
    return f"I suspect Player {observation['legal_votes'][0]}. <vote>{observation['legal_votes'][0]}</vote>"


url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"
with GenericEnvClient(base_url=url).sync() as env:
    result = env.reset(seed=3, seat=1)  # the same seed and seat replay the same game
    while not result.done:
        observation = result.observation
        print(f"[{observation['stage']}] prompt ends: {observation['messages'][-1]['content'][-110:]!r}")
        result = env.step({"text": respond(observation)})
        print(f"  reward {result.reward}, violations {result.metadata['violations']}")
    print("reward components:", result.metadata["reward_components"])
    print("spy seat:", result.metadata["truth"]["spy_seat"], "| votes:", result.metadata["truth"]["votes"])
