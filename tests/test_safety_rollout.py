"""``spyrl rollout`` of any length (issue #63): rows written as the games end, memory that does not grow with
the games asked for, Ctrl-C that keeps the finished games whole, counts below 1 refused, and buffer files
read only when they are regular files, a bounded line at a time."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest

import agents
from spy_env.buffer import EpisodeBuffer
from spy_env.config import GameConfig
from spy_env.runner import Runner
from spyrl.commands import main

ROOT = Path(__file__).resolve().parents[1]
STAGES_OF_A_GAME = 2 * 3  # perform and vote, three players, one round (the commands below)


def _spyrl(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "spyrl", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def _temporaries(out: Path) -> list[Path]:
    return list(out.parent.glob(f".{out.name}.*"))


def _one_line_error(err: str) -> bool:
    return err.startswith("error:") and len(err.strip().splitlines()) == 1


def _whole_games(path: Path) -> dict[tuple[str, int], list[dict]]:
    games = EpisodeBuffer.load(path).games()
    for rows in games.values():
        assert Counter((r["stage"], r["seat"]) for r in rows) == {
            (s, k): 1 for s in ("perform", "vote") for k in range(3)
        }
    return games


# ------------------------------------------------------------------ 1. memory bounded, rows written as they go
def test_rollout_holds_the_games_in_play_not_the_run(tmp_path, monkeypatch, capsys):
    """Every row of the run was held until the end: ``--games 10**12`` grew about 23 MB/s until killed. Counted
    after every fifth stage of 200 games (8 in play at a time, 48 rows a flush): the rows alive are those of the
    games in play and of one flush, not the run's 1,200."""
    import spy_env.buffer

    monkeypatch.setitem(Runner.__init__.__kwdefaults__, "max_concurrent_games", 8)
    monkeypatch.setattr(spy_env.buffer, "ROWS_PER_FLUSH", 48, raising=False)
    stages, alive = [], []
    play_stage = Runner._stage

    def counted(self, slots, policy_version):
        play_stage(self, slots, policy_version)
        stages.append(len(slots))
        if len(stages) % 5 == 0:  # a scan of the heap takes a while
            alive.append(sum(1 for o in gc.get_objects() if type(o) is dict and "completion_token_ids" in o))

    monkeypatch.setattr(Runner, "_stage", counted)
    out = tmp_path / "r.jsonl"
    argv = ["rollout", "--agent", "heuristic", "--players", "3", "--games", "200", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    assert f"{200 * STAGES_OF_A_GAME} rows from 200 games" in capsys.readouterr().out
    assert len(_whole_games(out)) == 200
    assert len(stages) == 2 * 200 // 8 and max(alive) <= 8 * STAGES_OF_A_GAME + 48 + STAGES_OF_A_GAME, alive


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_ctrl_c_keeps_the_finished_games_whole_and_says_how_many(tmp_path, suffix):
    """Ctrl-C lost every game played, and the output grew only at the very end. Now the games are written beside
    the output as they end, and Ctrl-C makes the output of the finished ones: whole games, the count said, exit 130."""
    out = tmp_path / f"r{suffix}"
    proc = _spyrl(
        "rollout", "--agent", "heuristic", "--players", "3", "--games", "100000", "--quiet", "--out", str(out)
    )
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if any(t.stat().st_size > 4096 for t in _temporaries(out)):  # rows, not only a parquet header
                break
            time.sleep(0.05)
        else:
            pytest.fail("no rows were written while the games were played")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert len(err.strip().splitlines()) == 2, err  # what was kept, and that it was interrupted
    kept, interrupted = err.strip().splitlines()
    assert (
        kept.startswith("kept the ")
        and kept.endswith(f" finished games of 100000 in {out}")
        and interrupted == "interrupted"
    )
    count = int(kept.split()[2])
    assert count > 0 and len(_whole_games(out)) == count
    assert _temporaries(out) == []
    assert main(["replay", str(out), "--limit", "1"]) == 0


# ----------------------------------------------------------------------------------- 2. counts below one
@pytest.mark.parametrize("flag, value", [("--games", "0"), ("--games", "-3"), ("--games-per-document", "0")])
def test_a_count_below_one_is_a_one_line_error_and_writes_nothing(tmp_path, flag, value, capsys):
    """``--games 0`` wrote a 0-byte buffer that ``spyrl replay`` refused; ``--games -3`` and
    ``--games-per-document 0`` were refused in words that named no flag."""
    out = tmp_path / "r.jsonl"
    argv = ["rollout", "--agent", "heuristic", "--players", "3", "--games", "2", "--quiet", "--out", str(out)]
    assert main([*argv, flag, value]) == 2
    err = capsys.readouterr().err
    assert _one_line_error(err) and f"{flag} must be at least 1, got {value}" in err
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------- 3. buffer files: regular, a bounded line at a time
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_buffer_that_is_not_a_regular_file_is_refused_at_once(tmp_path, kind, suffix, capsys):
    """A FIFO must not hang the reader and ``/dev/zero`` must not fill memory: one line naming what it is (the
    check was ``is_file()`` on the path, then a read of the path)."""
    import spy_env.buffer

    path = tmp_path / f"b{suffix}"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    what = "a FIFO" if kind == "fifo" else "a device or socket"
    message = f"episode buffer {str(path)!r} is {what}, not a regular file"
    for read in (EpisodeBuffer.load, lambda p: next(spy_env.buffer.stream_rows(p))):
        with pytest.raises(ValueError) as refused:
            _within(60, read, path)
        assert str(refused.value) == message
    assert _within(60, main, ["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert _one_line_error(err) and message in err


def _within(seconds: float, function, *args):
    """``function(*args)``, or a failure when it has not returned after ``seconds`` (a hang)."""
    outcome = {}

    def call():
        try:
            outcome["value"] = function(*args)
        except BaseException as e:  # handed to the test's thread
            outcome["error"] = e

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"{function} did not return in {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_a_line_without_end_is_refused_after_a_bounded_read(tmp_path):
    """The depth check read the whole file into memory first: a 512 MiB sparse file (no line end) took 512 MiB
    and more before any parser saw it. Now it is refused after one line's bound (64 MiB)."""
    path = tmp_path / "b.jsonl"
    size = 512 << 20
    with open(path, "wb") as f:
        f.truncate(size)  # sparse: no disk space taken
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as refused:
            EpisodeBuffer.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < size / 2, peak
    assert str(refused.value) == f"episode buffer {str(path)!r} line 1 is longer than 67,108,864 bytes"


# -------------------------------------------------------------------------------------- the writer itself
@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_a_buffer_written_game_by_game_loads_as_a_saved_one(tmp_path, suffix, monkeypatch):
    import spy_env.buffer
    from spy_env.buffer import stream_rows

    monkeypatch.setattr(spy_env.buffer, "ROWS_PER_FLUSH", 20)  # several flushes, one cut inside a batch of games
    runner = Runner(GameConfig(n_players=3), max_concurrent_games=4, run_id="r")
    games = list(runner.play([agents.load("heuristic", seed=1)] * 3, 13, seed=1))
    saved, streamed = tmp_path / f"saved{suffix}", tmp_path / f"streamed{suffix}"
    EpisodeBuffer([row for rows in games for row in rows]).save(saved)
    with EpisodeBuffer.writer(streamed) as writer:
        for rows in games:
            writer.write(rows)
    assert (writer.kept, writer.games, writer.rows) == (13, 13, 13 * STAGES_OF_A_GAME)
    assert EpisodeBuffer.load(streamed).rows == EpisodeBuffer.load(saved).rows
    assert list(stream_rows(streamed)) == EpisodeBuffer.load(saved).rows
    assert list(stream_rows(streamed, ("game_id",)))[-1] == {"game_id": 12}


def test_an_error_keeps_the_finished_games_and_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    import spy_env.buffer

    monkeypatch.setattr(spy_env.buffer, "ROWS_PER_FLUSH", 12)
    runner = Runner(GameConfig(n_players=3), run_id="r")
    games = list(runner.play([agents.load("heuristic", seed=1)] * 3, 5, seed=1))
    path = tmp_path / "b.parquet"
    EpisodeBuffer(games[0]).save(path)
    old = path.read_bytes()

    with pytest.raises(RuntimeError, match="a crash"), EpisodeBuffer.writer(path) as writer:
        raise RuntimeError("a crash")  # before any game: the old file stays
    assert writer.kept == 0 and path.read_bytes() == old and _temporaries(path) == []

    def full_disk(self, dataset):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(spy_env.buffer._ParquetSink, "write", full_disk)
        with pytest.raises(OSError), EpisodeBuffer.writer(path) as writer:
            for rows in games:
                writer.write(rows)
    assert writer.kept == 0 and path.read_bytes() == old and _temporaries(path) == []

    with pytest.raises(KeyboardInterrupt), EpisodeBuffer.writer(path) as writer:
        for rows in games[:3]:  # two flushed, one still held
            writer.write(rows)
        raise KeyboardInterrupt
    assert writer.kept == 3 and len(_whole_games(path)) == 3 and _temporaries(path) == []
