"""The openai backend against real servers on 127.0.0.1: `transformers serve`, and a small
stdlib HTTP server for retry and error semantics. No mocks."""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("httpx")

import agents
import spy_env
from agents import SamplingParams
from agents.openai_compat import OpenAIPolicy, RequestLimits
from spy_env.metrics import game_metrics
from spy_env.runner import rollout


@pytest.mark.slow
def test_end_to_end_against_transformers_serve(serve, tiny_model_dir):
    policy = agents.load(
        f"openai:{tiny_model_dir}@{serve.url}/v1",
        sampling=SamplingParams(max_new_tokens=8, temperature=0.7),
        limits=RequestLimits(max_concurrency=4),
    )
    heuristic = agents.load("heuristic")
    buffer = rollout(spy_env.GameConfig(n_players=4), [policy, heuristic, policy, heuristic], 3, seed=0)
    served = [r for r in buffer if r["agent_name"] == policy.name]
    assert len(served) == 3 * 2 * 2
    assert all(r["error"] == "" for r in served), [r["error"] for r in served if r["error"]]
    assert all(r["finish_reason"] in ("stop", "length") for r in served)
    assert policy.stats["completed"] == 12 and policy.stats["failures"] == 0


@pytest.mark.slow
def test_killing_the_server_mid_batch_gives_counted_forfeits_and_loses_no_rows(serve, tiny_model_dir):
    policy = OpenAIPolicy(
        str(tiny_model_dir),
        f"{serve.url}/v1",
        sampling=SamplingParams(max_new_tokens=48),
        limits=RequestLimits(max_concurrency=2, timeout=10, max_retries=1, backoff=0.05),
    )
    out = {}
    worker = threading.Thread(
        target=lambda: out.update(buffer=rollout(spy_env.GameConfig(n_players=5), [policy] * 5, 6, seed=0))
    )
    worker.start()
    deadline = time.monotonic() + 120
    while policy.stats["completed"] < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert policy.stats["completed"] >= 3
    serve.kill()  # in the middle of the performing stage's 30 requests
    worker.join(timeout=300)
    assert not worker.is_alive()
    buffer = out["buffer"]
    assert len(buffer) == 6 * 2 * 5  # every game finished, no row lost
    forfeits = [r for r in buffer if r["error"]]
    assert 0 < len(forfeits) < len(buffer)
    assert all(r["violations"] for r in forfeits)
    assert game_metrics(buffer)["forfeit_rate"] == pytest.approx(len(forfeits) / len(buffer))
    assert policy.stats["failures"] == len(forfeits)
    assert len({(r["game_id"], r["stage"], r["seat"]) for r in buffer}) == len(buffer)


class _Scripted(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions per the server's `plan` (list of status codes, then 200)."""

    def do_POST(self):
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.seen.append({"auth": self.headers.get("Authorization"), "body": body})
        status = server.plan.pop(0) if server.plan else 200
        if status == "garbage":
            payload, status = b"{not json", 200
        elif status == 200:
            payload = json.dumps(
                {
                    "choices": [
                        {
                            "message": {"role": "assistant", "content": "<vote>2</vote>"},
                            "finish_reason": "stop",
                            "logprobs": {
                                "content": [
                                    {"token": "<", "logprob": -0.25},
                                    {"token": "v", "logprob": -1.5},
                                ]
                            },
                            "token_ids": [11, 12],
                        }
                    ],
                    "prompt_token_ids": [1, 2, 3],
                }
            ).encode()
        else:
            payload = json.dumps({"error": f"status {status}"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    server.plan, server.seen = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def one_observation():
    env = spy_env.parallel_env(n_players=3)
    obs, _ = env.reset(seed=0)
    return obs["player_0"]


def test_retries_with_backoff_then_parses_logprobs_and_token_ids(scripted_server, monkeypatch, caplog):
    monkeypatch.setenv("SPYRL_TEST_KEY", "sk-secret-123")
    scripted_server.plan = [503, 429]
    url = f"http://127.0.0.1:{scripted_server.server_address[1]}/v1"
    policy = OpenAIPolicy(
        "m",
        url,
        api_key_env="SPYRL_TEST_KEY",
        limits=RequestLimits(backoff=0.01, max_retries=3),
        sampling=SamplingParams(seed=5),
    )
    with caplog.at_level(logging.DEBUG):
        [action] = policy.act([one_observation()])
    assert action.error is None and action.text == "<vote>2</vote>"
    assert action.logprobs == [-0.25, -1.5] and action.completion_token_ids == [11, 12]
    assert action.prompt_token_ids == [1, 2, 3]
    assert policy.stats["retries"] == 2 and policy.stats["completed"] == 1
    seen = scripted_server.seen
    assert len(seen) == 3 and all(s["auth"] == "Bearer sk-secret-123" for s in seen)
    assert seen[0]["body"]["messages"][0]["role"] == "system" and seen[0]["body"]["seed"] == 5
    assert "sk-secret" not in repr(policy) and "sk-secret" not in caplog.text


def test_client_errors_and_garbage_become_forfeits(scripted_server):
    url = f"http://127.0.0.1:{scripted_server.server_address[1]}/v1"
    policy = OpenAIPolicy("m", url, limits=RequestLimits(backoff=0.01, max_retries=2))
    scripted_server.plan = [400, "garbage", 500, 500, 500]
    actions = policy.act([one_observation()] * 3)
    errors = sorted(a.error.split(":")[0] for a in actions)
    assert all(a.text == "" and a.finish_reason == "error" for a in actions)
    assert errors == ["HTTP 400", "bad response", "gave up after 3 attempts"]


def test_unreachable_server_is_a_forfeit_not_a_crash():
    from tests.conftest import free_port

    policy = OpenAIPolicy(
        "m", f"http://127.0.0.1:{free_port()}/v1", limits=RequestLimits(max_retries=1, backoff=0.01, timeout=2)
    )
    [action] = policy.act([one_observation()])
    assert action.error.startswith("gave up after 2 attempts: ConnectError")


def test_spec_validation():
    with pytest.raises(ValueError):
        agents.load("openai:model")
    with pytest.raises(ValueError, match="http"):
        agents.load("openai:model@localhost:8000")
