"""Seat your own policy next to ours: anything with `name` and a batched `act` plugs in.

python examples/custom_policy.py
"""

import agents
from spy_env import GameConfig, Stage
from spy_env.metrics import game_metrics
from spy_env.runner import Runner


class AlwaysVoteForPlayerOne:
    """A (bad) policy: copies nothing, always answers 0 and votes for Player 1 (or Player 2)."""

    name = "always-one"

    def act(self, observations):
        replies = []
        for obs in observations:
            if Stage.of(obs["stage"]) is Stage.PERFORM:
                replies.append("Problem: what is 0 + 0? Solution: $\\boxed{0}$")
            else:
                target = 1 if obs["seat"] != 0 else 2
                replies.append(f"<vote>{target}</vote>")
        return replies


heuristic = agents.load("heuristic")
mine = AlwaysVoteForPlayerOne()
buffer = Runner(GameConfig()).run([mine, heuristic, heuristic, heuristic, heuristic], 200, seed=0)
mine_rows = [r for r in buffer if r["agent_name"] == mine.name]
print(
    "games:",
    len(buffer.games()),
    "| my mean reward:",
    sum(r["reward"] for r in mine_rows) / len(mine_rows),
)
print({k: round(v, 3) for k, v in game_metrics(buffer).items()})
