"""Play one game with scripted agents through the PettingZoo AEC API and print the transcript.

python examples/quickstart.py
"""

import agents
import spy_env

env = spy_env.make(n_players=5, degrade="mask_spans", render_mode="ansi")
policy = agents.load("heuristic")
env.reset(seed=0)
for _agent in env.agent_iter():
    observation, reward, terminated, truncated, info = env.last()
    if terminated or truncated:
        env.step(None)
        continue
    [action] = policy.act([observation])
    env.step(action)

print(env.render())
print("truth:", {k: info["truth"][k] for k in ("spy_seat", "votes", "spy_caught")})
