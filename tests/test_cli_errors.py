"""User mistakes end in ``error: ...`` on one line and exit code 2, before any work (issue #11).

In-process through ``spyrl.commands.main`` (a traceback would fail the test), plus subprocess runs
that check what a user sees and a hypothesis fuzz test over commands, arguments and files.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spy_env.buffer import EpisodeBuffer
from spyrl.commands import main

ROOT = Path(__file__).resolve().parents[1]


def run_main(argv: list[str]) -> int:
    """``main(argv)``; argparse's own errors (SystemExit) become their exit code."""
    try:
        return main(argv)
    except SystemExit as e:
        return 0 if e.code is None else int(e.code) if isinstance(e.code, int) else 2


def assert_user_error(argv: list[str], capsys, *needles: str) -> str:
    assert run_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err  # one line
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


@pytest.fixture
def buffer_file(tmp_path):
    path = tmp_path / "games.parquet"
    rows = [{"run_id": "r", "document_id": "d", "stage": "perform", "agent_name": "a", "completion": "x"}]
    EpisodeBuffer(rows).save(path)
    return path


# ------------------------------------------------------------------ finding 4: tracebacks
@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "missing", "folder", "not-a-buffer"])
def test_replay_of_a_bad_file_is_a_one_line_error(buffer_file, damage, capsys):
    data = buffer_file.read_bytes()
    if damage == "truncated":
        buffer_file.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        buffer_file.write_bytes(b"")
    elif damage == "garbage":
        buffer_file.write_bytes(os.urandom(300))
    elif damage == "missing":
        buffer_file.unlink()
    elif damage == "folder":
        buffer_file.unlink()
        buffer_file.mkdir()
    else:
        buffer_file = buffer_file.with_suffix(".jsonl")
        buffer_file.write_text('{"foo": 1}\n')
    assert_user_error(["replay", str(buffer_file)], capsys, buffer_file.name)


@pytest.mark.parametrize(
    "content, needle",
    [("a: [1,\n", "not valid YAML at line 2"), ("- 1\n- 2\n", "mapping"), (None, "does not exist")],
    ids=["malformed", "list", "missing"],
)
def test_train_config_file_mistakes(tmp_path, content, needle, capsys):
    path = tmp_path / "my.yaml"
    if content is not None:
        path.write_text(content)
    assert_user_error(["train", "--config", str(path)], capsys, needle)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["play", "--agent", "hf:/nonexistent/model"], "/nonexistent/model"),
        (["plot", "{tmp}/no-run"], "no-run"),
        (["eval", "--compare", "{tmp}/none.json"], "none.json"),
        (["eval", "--compare", "{tmp}/bad.json"], "not JSON"),
        # an output another command reserved (empty until it finishes): said so, not "not JSON"
        (["leaderboard", "spy", "--compare", "{tmp}/reserved.json"], "is empty: the command writing it"),
        (["eval", "--model", "heuristic", "--data", "gsm8k={tmp}/nothing", "--out", "{tmp}/r.json"], "nothing"),
        (["rollout", "--games", "1", "--out", "{tmp}"], "is a folder"),
        (["rollout", "--games", "1", "--out", "{tmp}/file.txt/x.parquet"], "not a folder"),
        (["rollout", "--games", "1", "--out", "{tmp}/x.csv"], ".parquet"),
        (["play", "--agent", "heuristic", "--out", "{tmp}/x.txt"], ".parquet"),
        (["tournament", "--games", "1", "--out", "{tmp}/file.txt"], "not a folder"),
        (["play", "--agent", "heuristic", "--corpus", "{tmp}/empty.jsonl"], "empty"),
        (["train", "--resume", "latest", "--output-dir", "{tmp}/empty-run"], "no checkpoint"),
    ],
)
def test_ordinary_mistakes_are_one_line_errors(tmp_path, argv, needle, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "bad.json").write_text("{oops")
    (tmp_path / "reserved.json").write_text("")
    (tmp_path / "empty.jsonl").write_text("")
    assert_user_error([a.replace("{tmp}", str(tmp_path)) for a in argv], capsys, needle)


def test_a_missing_output_folder_is_created(tmp_path, capsys):
    out = tmp_path / "new" / "sub" / "games.jsonl"
    assert run_main(["rollout", "--games", "2", "--quiet", "--out", str(out)]) == 0
    assert len(EpisodeBuffer.load(out)) > 0


def test_a_real_bug_keeps_its_traceback_and_debug_shows_every_one(tmp_path, monkeypatch):
    import spy_env.runner

    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(spy_env.runner.Runner, "play", broken)  # rollout plays its games through Runner.play
    with pytest.raises(KeyError):
        main(["rollout", "--games", "1", "--out", str(tmp_path / "x.parquet")])
    with pytest.raises(ValueError, match="must end in"):  # a user mistake, re-raised under --debug
        main(["--debug", "rollout", "--games", "1", "--out", str(tmp_path / "x.csv")])
    with pytest.raises(ValueError, match="must end in"):
        main(["rollout", "--games", "1", "--out", str(tmp_path / "x.csv"), "--debug"])


def test_the_installed_command_shows_one_line_and_exit_code_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "spyrl", "replay", str(tmp_path / "none.parquet")],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and "none.parquet" in proc.stderr


# --------------------------------------------------------- finding 7: outputs checked first
@pytest.mark.parametrize("out", ["x.csv", "{tmp}", "{tmp}/file.txt/x.parquet", "{tmp}/existing.parquet"])
def test_outputs_are_checked_before_any_game_is_played(tmp_path, out, capsys, monkeypatch):
    """Finding 7: ``rollout --games 3000 --out X.csv`` played every game before refusing."""
    import spy_env.runner

    def no_games(*args, **kwargs):
        raise AssertionError("games were played before the output was checked")

    monkeypatch.setattr(spy_env.runner.Runner, "run", no_games)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "existing.parquet").write_bytes(b"old")
    assert_user_error(["rollout", "--games", "3000", "--out", out.replace("{tmp}", str(tmp_path))], capsys)
    assert (tmp_path / "existing.parquet").read_bytes() == b"old"


# ---------------------------------------------------------------- finding 9: --overwrite
@pytest.mark.parametrize("command", ["rollout", "play"])
def test_out_refuses_to_overwrite_without_overwrite(tmp_path, command, capsys):
    out = tmp_path / "games.jsonl"
    out.write_text("precious\n")
    argv = [command, "--agent", "heuristic", "--players", "3", "--out", str(out)]
    argv += ["--games", "1", "--quiet"] if command == "rollout" else []
    assert_user_error(argv, capsys, "exists", "--overwrite")
    assert out.read_text() == "precious\n"
    assert run_main([*argv, "--overwrite"]) == 0
    assert len(EpisodeBuffer.load(out)) > 0


def test_tournament_refuses_to_overwrite_its_files(tmp_path, capsys):
    (tmp_path / "summary.json").write_text("{}")
    assert_user_error(["tournament", "--games", "1", "--out", str(tmp_path)], capsys, "summary.json", "--overwrite")
    assert (tmp_path / "summary.json").read_text() == "{}"


# ----------------------------------------------------------------- finding 8: config types
@pytest.mark.parametrize(
    "assignment, needle",
    [
        ("seed=abc", "SpyRLConfig.run.seed must be an integer"),
        ("model.name_or_path=[1,2]", "SpyRLConfig.model.name_or_path must be a string"),
        ("model=tiny", "set a field of 'model' (model.<field>=value)"),
        ("lora_r=1.5", "SpyRLConfig.model.lora_r must be an integer"),
        ("update.learning_rate=True", "SpyRLConfig.update.learning_rate must be a number"),
        ("iterations=2.0", "SpyRLConfig.run.iterations must be an integer"),
        ("progress=yes please", "SpyRLConfig.run.progress must be true or false"),
        ("loss.vote_mode=constrained", "SpyRLConfig.loss: unknown fields ['vote_mode']"),
        ("losses.beta=0", "unknown section 'losses'"),
        (
            "decoding.vote_mode=greedy",
            "SpyRLConfig.decoding.vote_mode must be one of ('free', 'constrained', 'think-then-vote')",
        ),
        ("vllm_server_url=http://[::1", "SpyRLConfig.rollout.vllm.server_url"),
        ("vllm_server_url=http://host:port", "SpyRLConfig.rollout.vllm.server_url"),
        ("rollout.vllm.server_url=ftp://host", "SpyRLConfig.rollout.vllm.server_url"),
        ("game.n_players=4.0", "GameConfig.rules.n_players must be an integer"),
        ("game.task=[1]", "GameConfig.rules.task must be a string"),
        ("seed=: [", "not valid YAML"),
    ],
)
def test_config_values_of_the_wrong_type_are_refused(assignment, needle, capsys):
    """Finding 8: these were accepted (``lora_r=1.5`` crashed only after writing ``tiny-model/``)."""
    assert_user_error(["train", "--print-config", "--set", assignment], capsys, needle)


def test_a_bad_type_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "run"
    assert_user_error(["train", "--preset", "cpu-smoke", "--output-dir", str(out), "--set", "lora_r=1.5"], capsys)
    assert not out.exists()


def test_good_values_still_pass(capsys):
    argv = ["train", "--print-config", "--set", "learning_rate=2e-6", "--set", "epsilon_high=0.28",
            "--set", "vllm_server_url=http://[::1]:8000", "--set", "vllm_max_model_length=null"]  # fmt: skip
    assert run_main(argv) == 0
    assert "learning_rate: 2.0e-06" in capsys.readouterr().out


# ---------------------------------------------------------------------------- the fuzz test
_WORDS = st.sampled_from(["0", "-1", "3", "1e9", "abc", "", " ", "[/red]", "[blink]", "\x1b[2J", "é", "None",
                          "true", "1.5", "=", "a=b", "../x", "/", "~"])  # fmt: skip
_TEXT = st.one_of(_WORDS, st.text(max_size=12))
_FILE_KIND = st.sampled_from(
    ["missing", "empty", "garbage", "folder", "jsonl-junk", "yaml-list", "yaml-bad", "shapes", "valid", "valid"]
)
_SHAPES = [b"{}", b"[1]", b"null", b'{"results": {"a": 1}, "model": 2}', b'{"results": [], "model": "m"}',
           b'{"iteration": "x", "stage": 3}\n[2]', b'{"text": ["a"], "id": {}}', b'"just a string"']  # fmt: skip
_DOC = "A class has 24 pupils; 3 of every 8 walk, so $24 \\cdot 3 / 8 = 9$ pupils walk to school. " * 3


def _valid(path: Path) -> None:
    """A well-formed file of the kind its name says."""
    import json

    if path.name == "b.txt":
        path.write_text("a buffer needs .parquet or .jsonl\n")
    elif path.name.startswith("b."):
        rows = [{"run_id": "r", "document_id": "d[/red]", "stage": "perform", "completion": "\x1b[2Jx"}]
        EpisodeBuffer(rows).save(path)
    elif path.name == "c.jsonl":
        path.write_text("\n".join(json.dumps({"id": f"d{i}", "text": f"{i}. {_DOC}"}) for i in range(4)))
    elif path.name == "c.yaml":
        path.write_text("preset: cpu-smoke\nseed: 3\n")
    elif path.name == "r.json":
        path.write_text(json.dumps({"model": "m[/red]", "results": {"gsm8k": {"accuracy": 0.5, "n": 2, "k": 1}}}))
    else:  # a run folder
        path.mkdir(exist_ok=True)
        (path / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "stage": "detect", "losses/kl": 0.1}))


def _make_file(root: Path, kind: str, name: str, payload: bytes) -> str:
    path = root / "in" / name
    path.parent.mkdir(exist_ok=True)
    if kind == "folder":
        path.mkdir(exist_ok=True)
    elif kind == "valid":
        _valid(path)
    elif kind == "shapes":
        shape = _SHAPES[payload[0] % len(_SHAPES)] if payload else b"{}"
        if name == "run":
            path.mkdir(exist_ok=True)
            (path / "metrics.jsonl").write_bytes(shape)
        else:
            path.write_bytes(shape)
    elif kind != "missing":
        content = {
            "empty": b"",
            "garbage": payload,
            "jsonl-junk": b'{"id": 1, "text": 5}\n{oops\n' + payload + b"\n",
            "yaml-list": b"- 1\n- [2]\n",
            "yaml-bad": b"a: [1,\n" + payload,
        }[kind]
        path.write_bytes(content)
    return str(path)


@st.composite
def _argv(draw, root: Path) -> tuple[list[str], str]:
    """A command with junk arguments and hostile files; returns (argv, its output path)."""
    command = draw(st.sampled_from(["replay", "rollout", "play", "train", "plot", "eval-compare", "tournament"]))
    kind = draw(_FILE_KIND)
    payload = draw(st.binary(max_size=64))
    name = draw(st.sampled_from(["x.parquet", "x.jsonl", "x.csv", "x.png", "", "sub/x.jsonl"]))
    out = str(root / "out" / name)
    if name and draw(st.booleans()):  # an output that already exists
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_bytes(b"old")
    small = [
        "--players",
        draw(st.sampled_from(["3", "3", "4", "2", "x"])),
        "--seed",
        draw(st.sampled_from(["0", "-5"])),
    ]
    agent = ["--agent", draw(st.sampled_from(["heuristic", "random", "random:7", "random:x", "hf:/none", "[/red]"]))]
    if command == "replay":
        argv = ["replay", _make_file(root, kind, draw(st.sampled_from(["b.parquet", "b.jsonl", "b.txt"])), payload)]
        argv += draw(st.sampled_from([[], ["--game", "3"], ["--limit", "-1"], ["--game", "x"]]))
    elif command in ("rollout", "play"):
        argv = [command, *small, *agent]
        if draw(st.booleans()):
            argv += ["--corpus", _make_file(root, kind, "c.jsonl", payload)]
        if command == "rollout":
            argv += ["--games", draw(st.sampled_from(["0", "1", "2", "-1", "x"])), "--quiet"]
        if command == "rollout" or draw(st.booleans()):
            argv += ["--out", out]
        argv += draw(st.sampled_from([[], ["--rounds", "0"], ["--mask-ratio", "2"], ["--seat", draw(_TEXT)]]))
    elif command == "train":
        argv = ["train", "--print-config", "--output-dir", str(root / "out" / "run")]
        if draw(st.booleans()):
            argv += ["--config", _make_file(root, kind, "c.yaml", payload)]
        argv += ["--set", f"{draw(st.sampled_from(['seed', 'lora_r', 'model', 'game.n_players', 'x']))}={draw(_TEXT)}"]
    elif command == "plot":
        argv = ["plot", _make_file(root, kind, "run", payload), "--out", out]
    elif command == "eval-compare":
        argv = ["eval", "--compare", _make_file(root, kind, "r.json", payload)]
        argv += ["--chart", out] if draw(st.booleans()) else []
    else:
        argv = ["tournament", "--games", draw(st.sampled_from(["0", "1", "x"])), "--agents",
                draw(st.sampled_from(["heuristic,random", "heuristic,heuristic", "", ",", "nope"])),
                "--out", str(root / "out" / "t"), "--quiet", "--players", "3"]  # fmt: skip
    return argv, out


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzzed_commands_exit_0_or_2_and_write_only_their_outputs(data):
    """Generated bad arguments and hostile files: exit code 0 or 2, never a traceback (an exception
    would fail the test), and nothing written outside the output path(s)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        argv, _ = data.draw(_argv(root))
        inputs = {p: p.stat().st_mtime_ns for p in (root / "in").rglob("*")} if (root / "in").exists() else {}
        cwd = os.getcwd()
        os.chdir(root)
        try:
            code = run_main(argv)
        finally:
            os.chdir(cwd)
        assert code in (0, 2), (argv, code)
        written = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        outside = [p for p in written if not p.startswith(("out/", "in/"))]
        assert not outside, (argv, outside)  # nothing beside the output paths (cwd included)
        if inputs:  # the command's input files are read, never changed
            assert {p: p.stat().st_mtime_ns for p in (root / "in").rglob("*")} == inputs, argv


def test_a_tournament_of_zero_games_is_a_one_line_error(tmp_path, capsys):
    """Found by the fuzz test above: ``--games 0`` divided by zero in the ratings."""
    code = run_main(["tournament", "--games", "0", "--agents", "heuristic,random", "--out", str(tmp_path / "t")])
    assert code == 2
    assert "at least 1 game" in capsys.readouterr().err
