"""spyrl.integrations.verifiers: one episode end to end through verifiers' own machinery (loader,
Env.run_episode, the null chat harness in a subprocess, its interception server) against a real
`transformers serve` on 127.0.0.1 (issue #21, item 3).

`transformers serve` ends a chat stream without OpenAI's ``data: [DONE]`` sentinel, which verifiers'
interception server requires; a pass-through relay on 127.0.0.1 adds it and changes nothing else.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import httpx
import verifiers.v1 as vf
from verifiers.v1.utils.loaders import environment_class, load_environment

import spy_env
from spy_env.degrade import DEGRADERS, Degraded
from spy_env.policy import chat_messages
from spyrl.integrations.verifiers import SpyEnv, SpyEnvConfig, gold_check
from tests.conftest import free_port


@pytest.fixture
def done_relay(serve):
    """127.0.0.1 relay to the real server that appends ``data: [DONE]`` to chat streams."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    async def chat(request):
        body = await request.json()
        client = httpx.AsyncClient(base_url=serve.url, timeout=300)
        if not body.get("stream"):
            reply = await client.post("/v1/chat/completions", json=body)
            await client.aclose()
            return Response(reply.content, reply.status_code, media_type="application/json")

        async def events():
            async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
                async for chunk in reply.aiter_raw():
                    yield chunk
            await client.aclose()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=30)


def test_the_loader_resolves_the_taskset_id_to_the_spy_env():
    assert environment_class("spyrl-game") is SpyEnv
    env = load_environment(SpyEnvConfig(taskset={"id": "spyrl-game", "n_players": 4, "num_games": 3}))
    tasks = list(env.taskset)
    assert len(tasks) == 3 and len({t.data.game_seed for t in tasks}) == 3


@pytest.mark.slow
def test_one_episode_end_to_end_against_a_real_server(done_relay, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("SPYRL_TEST_KEY", "unused")
    config = SpyEnvConfig(taskset={"id": "spyrl-game", "n_players": 4, "num_games": 1})
    env = load_environment(config)
    task = next(iter(env.taskset))
    client = vf.EvalClientConfig(base_url=done_relay, api_key_var="SPYRL_TEST_KEY")
    ctx = vf.ModelContext(model=str(tiny_model_dir), client=client, sampling=vf.SamplingConfig(max_tokens=12))

    async def play():
        async with env.serving():
            return await env.run_episode(task, ctx)

    episode = asyncio.run(play())
    assert episode.ok, episode.errors
    assert sorted(t.agent.name for t in episode.traces) == ["civilian", "civilian", "civilian", "spy"]
    # the same game in spy_env: its spy seat and first prompts are the ones the agents saw
    game = spy_env.parallel_env(spy_env.GameConfig(n_players=4, rounds=1))
    observations, _ = game.reset(seed=task.data.game_seed)
    for trace in episode.traces:
        seat = int(trace.metrics["seat"])
        assert (trace.agent.name == "spy") == (seat == game.game.spy_seat)
        assert trace.num_turns == 2  # perform, then vote
        sent = next(n.message for n in trace.nodes if getattr(n.message, "role", "") == "user")
        assert sent.content == chat_messages(observations[game.possible_agents[seat]])[-1]["content"]
        assert set(trace.rewards) == {"detect", "perform", "penalty"}
        weighted = sum(r.score * r.weight for r in trace.rewards.values())
        assert trace.reward == pytest.approx(weighted)
    # zero-sum performing rewards over the table, as in the env
    assert sum(t.rewards["perform"].score for t in episode.traces) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.slow
def test_the_verifiers_example_plays_an_episode(done_relay, tiny_model_dir, tmp_path):
    """examples/verifiers_episode.py as its docstring says to run it, against a real server on 127.0.0.1."""
    example = Path(__file__).resolve().parents[1] / "examples" / "verifiers_episode.py"
    proc = subprocess.run([sys.executable, str(example), done_relay, str(tiny_model_dir)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "episode ok: True" in proc.stdout and proc.stdout.count("first reply:") == 4


def _vf_validate(tmp_path, *args):
    """``vf-validate spyrl-game`` as a user runs it (verifiers' own CLI), its summary.json and result rows."""
    exe = shutil.which("vf-validate", path=str(Path(sys.executable).parent)) or shutil.which("vf-validate")
    assert exe, "verifiers installs vf-validate"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    cmd = [exe, "spyrl-game", *args, "--runtime.type", "subprocess", "-o", str(tmp_path), "--rich", "false"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = [d for d in tmp_path.iterdir() if d.is_dir()]
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line.strip()]
    return json.loads((run / "summary.json").read_text()), rows


def test_vf_validate_runs_a_gold_and_a_noop_check_on_every_game(tmp_path):
    """Before: SpyTask had no reward and no validate(), so both checks came back 'unchecked'."""
    summary, rows = _vf_validate(tmp_path, "--taskset.num-games", "3", "--taskset.n-players", "4")
    assert summary["total"] == 3 and summary["valid_rate"] == 1.0
    for check in ("gold", "noop"):
        assert summary["checks"][check]["valid"] == 3, summary["checks"]
    # the untouched game scores nothing: no vote caught anyone, no performance was judged
    for row in rows:
        assert row["noop"]["reward"] == 0.0
        assert set(row["noop"]["rewards"]) == {"detect", "perform", "penalty"}


def test_gold_check_fails_a_game_whose_spy_copy_is_not_degraded(monkeypatch):
    def unchanged(text, rng, ctx):
        return Degraded(text, (), "unchanged")

    monkeypatch.setitem(DEGRADERS, "unchanged", unchanged)
    for seed in range(3):
        assert gold_check(spy_env.GameConfig(n_players=4, rounds=1), seed)
        assert not gold_check(spy_env.GameConfig(n_players=4, rounds=1, degrade="unchanged"), seed)


def test_tasks_record_the_game_they_belong_to():
    env = load_environment(
        SpyEnvConfig(taskset={"id": "spyrl-game", "n_players": 6, "num_games": 2, "degrade": "blank"})
    )
    for task in env.taskset:
        assert (task.data.n_players, task.data.degrade) == (6, "blank")
        assert task.data.game_config() == env.taskset.config.game_config()
