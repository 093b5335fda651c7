"""`spyrl serve` under load and under misuse (issue #28, item 1): one real server process on
127.0.0.1 with an LLM seat (a tiny random model), driven over HTTP and raw WebSocket frames."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest

pytest.importorskip("openenv")
pytest.importorskip("transformers")

from websockets.sync.client import connect

from tests.conftest import free_port

VOTE = "Player 2 looks off. <vote>2</vote>"
SESSIONS = 16


@pytest.fixture(scope="module")
def llm_dir(tmp_path_factory):
    """A small random Llama (2 MB of weights; a copy per session is caught by the load-count test below)."""
    from agents.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("serve-llm") / "model", hidden_size=128)


def _start(llm_dir, log_path, *extra):
    port = free_port()
    cmd = [sys.executable, "-m", "spyrl", "serve", "--port", str(port), "--seats", f"hf:{llm_dir}", "--players", "3"]
    cmd += ["--max-new-tokens", "2", "--max-document-chars", "200", *extra]
    log = open(log_path, "w")  # noqa: SIM115 - the process owns it until it ends
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, Path(log_path).read_text()
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return proc, port, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("server did not start")


@pytest.fixture(scope="module")
def server(llm_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    proc, port, url = _start(llm_dir, log, "--idle-timeout", "3", "--per-client", str(SESSIONS))
    yield proc, port, url, log
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _ws(port):
    return connect(f"ws://127.0.0.1:{port}/ws", open_timeout=30, max_size=None)


def _send(ws, kind, data, timeout=300):
    ws.send(json.dumps({"type": kind, "data": data}))
    return json.loads(ws.recv(timeout=timeout))


def _game(port, seed) -> float:
    with _ws(port) as ws:
        reply = _send(ws, "reset", {"seed": seed, "seat": 0})
        assert reply["type"] == "observation", reply
        while not reply["data"]["done"]:
            reply = _send(ws, "step", {"text": VOTE})
            assert reply["type"] == "observation", reply
        return reply["data"]["reward"]


def _post(url, path, body: bytes):
    request = urllib.request.Request(url + path, data=body, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's RSS from /proc")
def test_sixteen_concurrent_games_with_an_llm_seat_keep_memory_flat(server):
    proc, port, _, _ = server
    _game(port, seed=0)  # the model warm, one game played: the baseline
    one_game = _rss_mb(proc.pid)
    peak, stop = one_game, threading.Event()

    def sample():
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _rss_mb(proc.pid))
            time.sleep(0.05)

    rewards = {}
    games = [
        threading.Thread(target=lambda s=s: rewards.__setitem__(s, _game(port, s))) for s in range(1, 1 + SESSIONS)
    ]
    sampler = threading.Thread(target=sample)
    sampler.start()
    for t in games:
        t.start()
    for t in games:
        t.join(timeout=300)
    stop.set()
    sampler.join()
    assert sorted(rewards) == list(range(1, 1 + SESSIONS))  # every game finished
    print(f"RSS after one game {one_game:.0f} MB, peak with {SESSIONS} concurrent games {peak:.0f} MB")
    assert peak <= 1.2 * one_game, f"RSS {one_game:.0f} MB after one game, {peak:.0f} MB at peak with {SESSIONS}"


def test_the_model_is_loaded_once_for_every_session_and_http_call(llm_dir, monkeypatch):
    """In process: OpenEnv's app, 3 WebSocket sessions and the HTTP routes; the model loads once, at start."""
    from fastapi.testclient import TestClient

    import spy_env
    from agents.hf import HFPolicy
    from spyrl.integrations.openenv import create_spy_app

    loads = []
    load = HFPolicy.from_pretrained.__func__
    monkeypatch.setattr(
        HFPolicy, "from_pretrained", classmethod(lambda cls, *a, **k: loads.append(a) or load(cls, *a, **k))
    )
    app = create_spy_app(spy_env.GameConfig(n_players=3, max_document_chars=200), f"hf:{llm_dir}")
    assert len(loads) == 1
    with TestClient(app) as client:
        for path in ("/metadata", "/state", "/health"):
            assert client.get(path).status_code == 200
        assert client.post("/reset", json={"seed": 1}).status_code == 200
        with ExitStack() as stack:
            sessions = [stack.enter_context(client.websocket_connect("/ws")) for _ in range(3)]
            for seed, ws in enumerate(sessions):
                ws.send_json({"type": "reset", "data": {"seed": seed}})
                assert ws.receive_json()["type"] == "observation"
            sessions[0].send_json({"type": "step", "data": {"text": VOTE}})  # the LLM seats play
            assert sessions[0].receive_json()["type"] == "observation"
    assert len(loads) == 1


def test_parallel_http_resets_do_not_stall_the_server(server):
    """Six clients reset at once (each HTTP call builds a fresh environment) while another polls
    ``/health`` and ``/metadata``: every reset is a 200 and neither probe waits behind them. When each
    environment loaded its own seat model on the event loop, a reset took 15 s and stalled ``/health``
    as long."""
    _, _, url, _ = server
    results: list[tuple[int, float]] = []

    def reset(seed: int) -> None:
        start = time.monotonic()
        status, _ = _post(url, "/reset", json.dumps({"seed": seed}).encode())
        results.append((status, time.monotonic() - start))

    threads = [threading.Thread(target=reset, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    probes = []
    while any(thread.is_alive() for thread in threads) or not probes:
        for path in ("/health", "/metadata"):
            start = time.monotonic()
            with urllib.request.urlopen(url + path, timeout=30) as reply:
                assert reply.status == 200
            probes.append(time.monotonic() - start)
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(status for status, _ in results) == [200] * 6
    assert max(seconds for _, seconds in results) < 10, results
    assert max(probes) < 2.0, probes  # a probe is answered while the resets run


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"seed": 1, "seat": 9}, 400, "seat must be in 0..2, got 9"),
        ({"seed": 1, "seat": True}, 400, "seat must be an integer in 0..2, got True"),
        ({"seed": 1.9}, 400, "seed must be an integer in 0..9223372036854775807, got 1.9"),
        ({"seed": True}, 400, "seed must be an integer in 0..9223372036854775807, got True"),
        ({"seed": "3"}, 400, "seed must be an integer in 0..9223372036854775807, got '3'"),
        ({"seed": -1}, 400, "seed must be in 0..9223372036854775807, got -1"),
        ({"seed": 1, "episode_id": 5}, 422, "body.episode_id: Input should be a valid string"),
        ({"seed": 1, "spy_seat": 1.5}, 400, "spy_seat must be an integer"),
        ({"seed": 1, "bogus": 2}, 400, "unknown reset options ['bogus']"),
        ({"seed": 1, "document_id": "nope"}, 400, "is not in the corpus"),
    ],
)
def test_http_mistakes_are_4xx_with_a_one_line_reason_and_the_same_over_websocket(server, body, status, message):
    _, port, url, log = server
    got, reply = _post(url, "/reset", json.dumps(body).encode())
    assert got == status and message in reply["detail"] and "\n" not in reply["detail"], reply
    if status == 400:  # the environment's own check: the same words in a WebSocket error frame
        with _ws(port) as ws:
            frame = _send(ws, "reset", body)
            assert frame["type"] == "error" and message in frame["data"]["message"], frame
            assert _send(ws, "reset", {"seed": 1, "seat": 1})["type"] == "observation"  # the session goes on
    assert "Traceback" not in Path(log).read_text()


def test_http_step_is_a_409_that_points_to_the_websocket_and_bad_actions_are_one_line(server):
    _, _, url, _ = server
    status, reply = _post(url, "/step", json.dumps({"action": {"text": VOTE}}).encode())
    assert status == 409 and "/ws" in reply["detail"] and "stateless" in reply["detail"], reply
    status, reply = _post(url, "/step", json.dumps({"action": {"txt": VOTE}}).encode())
    assert status == 422 and reply["detail"] == "text: Field required; txt: Extra inputs are not permitted"


def test_request_body_limit_mcp_sessions_per_client_cap_and_idle_timeout(server):
    _, port, url, _ = server
    with socket.create_connection(("127.0.0.1", port)) as s:  # a 200 MB body is refused before it is read
        s.sendall(b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 200000000\r\n\r\n" + b"x" * 1000)
        assert s.recv(200).startswith(b"HTTP/1.1 413")
    create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
    status, reply = _post(url, "/mcp", json.dumps(create).encode())
    assert status == 400 and "/ws" in reply["detail"]
    with ExitStack() as stack:
        held = [stack.enter_context(_ws(port)) for _ in range(SESSIONS)]
        for ws in held:
            assert _send(ws, "reset", {"seed": 1})["type"] == "observation"
        with _ws(port) as extra:
            frame = json.loads(extra.recv(timeout=30))
            assert frame["data"]["code"] == "CAPACITY_REACHED" and "per-client" in frame["data"]["message"]
        time.sleep(4)  # --idle-timeout 3: every held session is closed with a reason
        for ws in held:
            frame = json.loads(ws.recv(timeout=10))
            assert frame["type"] == "error" and "without a message" in frame["data"]["message"], frame
    assert _game_starts(port)  # the slots are free again


def _game_starts(port) -> bool:
    with _ws(port) as ws:
        return _send(ws, "reset", {"seed": 2})["type"] == "observation"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seats", "human"], "--seats: 'human' reads the server's terminal"),
        (["--seats", "heuristic,human,random", "--players", "4"], "'human'"),
        (["--per-client", "0"], "--per-client must be >= 1"),
        (["--idle-timeout", "0"], "--idle-timeout must be > 0"),
        (["--max-request-bytes", "0"], "--max-request-bytes must be >= 1"),
    ],
)
def test_serve_refuses_a_human_seat_and_bad_limits(argv, message, capsys):
    from spyrl.commands import main

    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err


def test_help_states_that_there_is_no_authentication(capsys):
    from spyrl.commands import main

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "no authentication" in " ".join(capsys.readouterr().out.split())


def test_ctrl_c_exits_130_within_seconds_while_clients_hold_sessions_and_half_requests(server):
    """Last: it stops the module's server."""
    proc, port, _, log = server
    with _ws(port) as ws:
        _send(ws, "reset", {"seed": 1})
        with socket.create_connection(("127.0.0.1", port)) as half:
            half.sendall(b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            time.sleep(0.5)
            start = time.monotonic()
            os.kill(proc.pid, signal.SIGINT)
            assert proc.wait(timeout=30) == 130
            assert time.monotonic() - start < 10
    assert "Traceback" not in Path(log).read_text()
