"""spyrl.integrations.openenv: a real `spyrl serve` on 127.0.0.1 driven by OpenEnv's own client
(issue #21, item 2). No stand-in: the server process is the CLI, the client is GenericEnvClient."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("openenv")

from openenv.core import GenericEnvClient

import spy_env
from spy_env.policy import chat_messages
from spyrl.integrations.openenv import SpyAction, SpyEnvironment
from tests.conftest import free_port

GOOD = "Problem: what is $2 + 3$?\nSolution: $2 + 3 = 5$, so the answer is $\\boxed{5}$."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = open(tmp_path_factory.mktemp("serve") / "serve.log", "w")  # noqa: SIM115 - closed below
    cmd = [sys.executable, "-m", "spyrl", "serve", "--host", "127.0.0.1", "--port", str(port), "--seats", "heuristic"]
    proc = subprocess.Popen([*cmd, "--players", "4"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, Path(log.name).read_text()
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                break
        except OSError:
            time.sleep(0.3)
    yield url
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def _play_remote(url, seed, seat, texts):
    with GenericEnvClient(base_url=url).sync() as client:
        return _play(lambda **kw: client.reset(**kw), lambda t: client.step({"text": t}), seed, seat, texts)


def _play_local(seed, seat, texts):
    env = SpyEnvironment(spy_env.GameConfig(n_players=4), "heuristic")

    def result(obs):
        data = obs.model_dump(exclude={"reward", "done", "metadata"})
        return {"observation": data, "reward": obs.reward, "done": obs.done, "metadata": obs.metadata}

    return _play(lambda **kw: result(env.reset(**kw)), lambda t: result(env.step(SpyAction(text=t))), seed, seat, texts)


def _play(reset, step, seed, seat, texts):
    """The whole game: (observation, reward, done, metadata) after reset and each step."""
    out = [_plain(reset(seed=seed, seat=seat))]
    for text in texts:
        out.append(_plain(step(text)))
        if out[-1][2]:
            break
    return out


def _plain(result):
    if isinstance(result, dict):
        return result["observation"], result["reward"], result["done"], result["metadata"]
    metadata = result.metadata or result.observation.get("metadata") or {}
    observation = {k: v for k, v in result.observation.items() if k != "metadata"}
    return observation, result.reward, result.done, metadata


def test_a_full_game_over_the_wire_equals_the_same_game_in_process(server):
    texts = [GOOD, "Player 2 looks off. <vote>2</vote>"]
    remote = _play_remote(server, seed=7, seat=2, texts=texts)
    local = _play_local(seed=7, seat=2, texts=texts)
    assert [r[0] for r in remote] == [r[0] for r in local]  # every observation, exactly
    assert [r[1] for r in remote] == pytest.approx([r[1] for r in local])
    assert [r[2] for r in remote] == [False, False, True]
    final = remote[-1][3]
    assert set(final["reward_components"]) >= {"detect", "perform", "perform_penalty", "vote_penalty"}
    assert final["truth"]["spy_seat"] == final["reset_options"]["spy_seat"]
    # the first prompt is spy_env's own for that seed and seat
    env = spy_env.parallel_env(spy_env.GameConfig(n_players=4))
    observations, _ = env.reset(seed=7)
    assert remote[0][0]["messages"] == chat_messages(observations["player_2"])
    assert remote[1][0]["stage"] == "vote" and remote[1][0]["legal_votes"] == [1, 2, 4]


def test_same_seed_and_seat_replay_the_game_and_junk_is_a_recorded_violation(server):
    texts = ["\x1b[2J" + "junk " * 300, "no vote here"]
    first = _play_remote(server, seed=11, seat=0, texts=texts)
    again = _play_remote(server, seed=11, seat=0, texts=texts)
    assert first == again
    assert first[1][3]["violations"] and first[2][3]["violations"]
    assert first[2][1] < 0  # penalties


def test_concurrent_sessions_do_not_mix(server):
    jobs = {(seed, seat): None for seed, seat in [(1, 0), (2, 3), (3, 1), (4, 2)]}
    texts = [GOOD, "<vote>1</vote>"]

    def run(key):
        jobs[key] = _play_remote(server, key[0], key[1], texts)

    threads = [threading.Thread(target=run, args=(key,)) for key in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for (seed, seat), got in jobs.items():
        assert got == _play_local(seed, seat, texts), (seed, seat)


def test_bad_reset_arguments_are_refused_and_the_session_goes_on(server):
    with GenericEnvClient(base_url=server).sync() as client:
        with pytest.raises(Exception, match="seat"):
            client.reset(seed=1, seat=9)
        assert client.reset(seed=1, seat=1).observation["seat"] == 1


@pytest.mark.slow  # OpenEnv's CLI imports gradio: tens of seconds
def test_openenv_validate_passes_on_the_manifest_and_the_running_server(server):
    root = Path(__file__).resolve().parents[1]
    cli = [sys.executable, "-m", "openenv.cli", "validate"]
    static = subprocess.run(
        [*cli, str(root / "deploy" / "openenv"), "--level", "static"], capture_output=True, text=True
    )
    assert static.returncode == 0 and "Verdict: PASS" in static.stdout, static.stdout + static.stderr
    live = subprocess.run([*cli, "--url", server], capture_output=True, text=True, timeout=120)
    assert live.returncode == 0 and "Verdict: PASS" in live.stdout, live.stdout + live.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "0"], "--port must be in 1..65535"),
        (["--seats", "bogus:x"], "--seats: unknown agent spec"),
        (["--players", "2"], "n_players"),
        (["--max-sessions", "0"], "--max-sessions"),
    ],
)
def test_serve_mistakes_are_one_line_errors(argv, message, capsys):
    from spyrl.commands import main

    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err


def test_serve_on_a_taken_port_is_a_one_line_error(capsys):
    import socket

    from spyrl.commands import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["serve", "--port", str(taken.getsockname()[1])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot listen on 127.0.0.1:") and "\n" not in err


def test_the_typed_client_plays_the_same_game_with_typed_actions_observations_and_state(server):
    from spyrl.integrations.openenv import SpyObservation, SpyState
    from spyrl.integrations.openenv_client import SpyEnvClient

    texts = [GOOD, "Player 2 looks off. <vote>2</vote>"]
    with SpyEnvClient(base_url=server).sync() as env:
        results = [env.reset(seed=7, seat=2)]
        results.append(env.step(SpyAction(text=texts[0])))
        state = env.state()
        results.append(env.step(texts[1]))  # a plain string is the seat's text
    assert all(isinstance(r.observation, SpyObservation) for r in results)
    assert isinstance(state, SpyState) and (state.seed, state.seat, state.stage) == (7, 2, "vote")
    local = _play_local(seed=7, seat=2, texts=texts)
    assert [r.observation.model_dump(exclude={"reward", "done", "metadata"}) for r in results] == [x[0] for x in local]
    assert [r.reward for r in results] == pytest.approx([x[1] for x in local])
    assert results[-1].done and results[-1].observation.metadata["truth"] == local[-1][3]["truth"]


def test_the_openenv_client_example_plays_a_served_seat(server):
    """examples/openenv_client.py as its docstring says to run it, against ``spyrl serve`` on 127.0.0.1."""
    example = Path(__file__).resolve().parents[1] / "examples" / "openenv_client.py"
    proc = subprocess.run([sys.executable, str(example), server], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[perform]" in proc.stdout and "[vote]" in proc.stdout and "spy seat:" in proc.stdout


def test_autoenv_discovers_the_installed_openenv_spyrl_package(tmp_path):
    """deploy/openenv installs `openenv-spyrl` (no module of its own, no top-level `server`); AutoEnv then
    finds `spyrl`, its manifest and the typed client."""
    import yaml

    root = Path(__file__).resolve().parents[1]
    assert yaml.safe_load((root / "spyrl" / "openenv.yaml").read_text()) == yaml.safe_load(
        (root / "deploy" / "openenv" / "openenv.yaml").read_text()
    )
    site = tmp_path / "site"  # installed beside this environment, not into it
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    done = subprocess.run(
        [*install, "--target", str(site), str(root / "deploy" / "openenv")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in site.iterdir() if p.name != "bin") == ["openenv_spyrl-0.1.0.dist-info"]
    code = (
        "import importlib.util, json; from openenv import AutoEnv; info = AutoEnv.get_env_info('spyrl'); "
        "print(json.dumps([AutoEnv.get_env_class('spyrl').__name__, info['package'], "
        "importlib.util.find_spec('server') is None]))"
    )
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{site}", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout.strip().splitlines()[-1]) == ["SpyEnvClient", "openenv-spyrl", True]


def _copied_sources(dockerfile: Path) -> list[str]:
    """The sources of the Dockerfile's COPY/ADD instructions (not ``--from`` stages)."""
    sources = []
    for line in dockerfile.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if words and words[0].upper() in ("COPY", "ADD") and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


def _openenv_build(env: Path, monkeypatch) -> dict:
    """OpenEnv's own ``openenv build`` preparation of ``env`` (its copy of the folder as the context, its choice of
    Dockerfile and command), stopped where it would call docker: what the build would see, and what it lacks."""
    import zipfile

    from openenv.cli.commands import build

    seen: dict = {}

    def run(cmd, cwd=None, check=True):
        context, dockerfile = Path(cmd[-1]), Path(cmd[cmd.index("-f") + 1])
        missing = [s for s in _copied_sources(dockerfile) if s not in (".", "./") and not (context / s).exists()]
        wheels = sorted((context / "wheels").glob("spyrl-*.whl"))
        names = zipfile.ZipFile(wheels[0]).namelist() if wheels else []
        seen.update(cmd=cmd, context=context, dockerfile=dockerfile.read_text(), missing=missing, wheel=names)
        seen["constraints"] = (context / "wheels" / "constraints.txt").is_file()
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(build, "_run_command", run)
    assert build._build_docker_image(env_path=env, tag="spyrl-env:latest")
    return seen


@pytest.mark.slow
def test_openenv_build_from_the_folder_alone_sees_everything_its_dockerfile_copies(tmp_path, monkeypatch, capsys):
    """`openenv build deploy/openenv` builds from a copy of that folder only: after `vendor.py` (spyrl's wheel
    and its pins into wheels/), every COPY source is inside that context; before it, the build lacks wheels/.
    (No docker here: OpenEnv's preparation runs for real and stops at the docker call.)"""
    import importlib.util
    import shutil

    import yaml

    root = Path(__file__).resolve().parents[1]
    env = tmp_path / "spyrl"
    shutil.copytree(root / "deploy" / "openenv", env, ignore=shutil.ignore_patterns("wheels", "__pycache__"))
    assert _openenv_build(env, monkeypatch)["missing"] == ["wheels/"]

    spec = importlib.util.spec_from_file_location("openenv_vendor", root / "deploy" / "openenv" / "vendor.py")
    vendor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vendor)
    assert vendor.main(["--out", str(env)]) == 0
    assert "next: openenv build" in capsys.readouterr().out
    seen = _openenv_build(env, monkeypatch)
    assert seen["missing"] == [] and seen["constraints"]
    assert seen["cmd"][:4] == ["docker", "build", "-t", "spyrl-env:latest"] and seen["cmd"][-1] == str(seen["context"])
    # the image installs spyrl from that wheel: the game, its server and what AutoEnv reads
    assert {"spyrl/openenv.yaml", "spyrl/client.py", "spy_env/env.py", "spyrl/integrations/openenv.py"} <= set(
        seen["wheel"]
    )
    manifest = yaml.safe_load((env / "openenv.yaml").read_text())
    assert f"EXPOSE {manifest['port']}" in seen["dockerfile"]
    assert f'"{manifest["app"]}"' in seen["dockerfile"] and str(root) not in seen["dockerfile"]
    assert vendor.main(["--out", str(tmp_path)]) == 2  # not an environment folder
    assert capsys.readouterr().err.startswith("error: ")
