"""Safety, issue #63 items 1 and 2: the readers of user files (a corpus, benchmark data, a run's
metrics) read a file as it comes, never whole: ``/dev/zero`` or a sparse file of gigabytes was a
MemoryError, a FIFO hung the command, and ``eval --data`` scored stale questions from the
``datasets`` cache (keyed by a file's path, size and modification time) or ended in a 75-line
``DatasetGenerationError``.

What could hang or exhaust memory on a regressed tree runs in a subprocess with a deadline and its
data memory capped at 4 GiB (a read of ``/dev/zero`` then fails with a MemoryError instead of
waking the OOM killer)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from spyrl.commands import main

ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT / "tests" / "fixtures" / "benchmarks" / "gsm8k"
DATA_LIMIT = 4 << 30  # bytes of writable memory a CLI subprocess may map (it needs about 1.4 GiB)
TEXT = "The sum of two even numbers is even, since each of them is twice an integer and so is their sum. "


@dataclass
class Run:
    returncode: int
    stderr: str
    max_rss: int  # bytes
    cpu_seconds: float  # user and system: what the run costs, however busy the machine is


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (DATA_LIMIT, DATA_LIMIT))


def _spyrl(cwd: Path, *argv: str, timeout: float = 120) -> Run:
    """``python -m spyrl ARGV`` in ``cwd`` (this checkout's code): its exit code, stderr, peak resident
    memory and processor time. A run past ``timeout`` (a read that blocks on a FIFO) is killed and fails the test."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    err = cwd / "stderr.txt"
    start = time.monotonic()
    with open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "spyrl", *argv],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=_cap_memory,
        )
    while True:  # os.wait4, not proc.wait: it gives this child's own peak memory
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - start > timeout:
            proc.kill()
            os.wait4(proc.pid, 0)
            proc.returncode = -9
            pytest.fail(f"spyrl {' '.join(argv)} ran past {timeout} s (blocked on a read?)")
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr_text = err.read_text(errors="replace")
    return Run(proc.returncode, stderr_text, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime)


def _one_line_error(err: str) -> bool:
    return err.startswith("error:") and len(err.strip().splitlines()) == 1


def _documents(n: int) -> bytes:
    return b"".join(json.dumps({"id": f"d{i}", "text": f"Document {i}. {TEXT * 2}"}).encode() + b"\n" for i in range(n))


def _hostile(tmp_path: Path, kind: str, name: str) -> Path:
    """``name`` in ``tmp_path`` as a link to ``/dev/zero`` (``device``) or a FIFO nobody writes to."""
    path = tmp_path / name
    if kind == "device":
        path.symlink_to("/dev/zero")
    else:
        os.mkfifo(path)
    return path


# ------------------------------------------------------------------ 1. devices, FIFOs, sparse files
@pytest.mark.parametrize("kind, name", [("device", "c.jsonl"), ("fifo", "c.jsonl"), ("fifo", "c.parquet")])
def test_a_device_or_fifo_corpus_is_a_one_line_error(tmp_path, kind, name):
    """``--corpus`` on ``/dev/zero`` was a MemoryError after eating the machine's memory
    (``--max-documents 5`` did not help); on a FIFO, ``spyrl play`` hung."""
    path = _hostile(tmp_path, kind, name)
    run = _spyrl(tmp_path, "play", "--agent", "heuristic", "--corpus", path.name, "--max-documents", "5")
    assert run.returncode == 2, (run.returncode, run.stderr[-500:])
    assert _one_line_error(run.stderr) and name in run.stderr and "not a regular file" in run.stderr


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_device_or_fifo_as_eval_data_is_a_one_line_error(tmp_path, kind):
    path = _hostile(tmp_path, kind, "q.jsonl")
    run = _spyrl(tmp_path, "eval", "--model", "heuristic", "--data", f"gsm8k={path.name}", "--out", "e.json")
    assert run.returncode == 2, (run.returncode, run.stderr[-500:])
    assert _one_line_error(run.stderr) and "q.jsonl" in run.stderr and "not a regular file" in run.stderr


def test_plot_of_a_run_whose_metrics_are_a_fifo_is_a_one_line_error(tmp_path):
    """``spyrl plot RUN`` hung on a ``metrics.jsonl`` that is a FIFO."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.mkfifo(run_dir / "metrics.jsonl")
    run = _spyrl(tmp_path, "plot", "run")
    assert run.returncode == 2, (run.returncode, run.stderr[-500:])
    assert _one_line_error(run.stderr) and "metrics.jsonl" in run.stderr and "not a regular file" in run.stderr
    assert not (run_dir / "curves.png").exists()


def test_a_game_starts_on_the_first_documents_of_a_sparse_2_gb_corpus(tmp_path):
    """Five documents, then a hole to 2 GB: the whole file was read (4.4 GB resident and 18 s, then a
    MemoryError). With ``--max-documents 5`` the reader stops after the fifth line: the game is played in
    about 4 s (processor time is measured, not wall time, which other work on the machine stretches)."""
    corpus = tmp_path / "sparse.jsonl"
    with open(corpus, "wb") as f:
        f.write(_documents(5))
        f.seek(2**31)
        f.write(b"\n")
    assert corpus.stat().st_size > 2**31
    run = _spyrl(tmp_path, "play", "--agent", "heuristic", "--corpus", corpus.name, "--max-documents", "5")
    assert run.returncode == 0, (run.returncode, run.stderr[-500:])
    assert run.max_rss < 1 << 30, f"peak RSS {run.max_rss / 2**20:.0f} MiB"
    assert run.cpu_seconds < 10, f"{run.cpu_seconds:.1f} s"
    # without the limit the sixth line is read, up to its bound, and refused
    run = _spyrl(tmp_path, "play", "--agent", "heuristic", "--corpus", corpus.name)
    assert run.returncode == 2 and _one_line_error(run.stderr), run.stderr[-500:]
    assert "sparse.jsonl' line 6 is longer than" in run.stderr
    assert run.max_rss < 1 << 30, f"peak RSS {run.max_rss / 2**20:.0f} MiB"


# ---------------------------------------------------------------------- 2. eval --data reads afresh
def _question_file(path: Path, answer: int, mtime: float = 1_700_000_000) -> None:
    rows = [{"question": f"Ana has {answer} apples and eats none. How many are left?", "answer": f"#### {answer}"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.utime(path, (mtime, mtime))


@pytest.mark.parametrize("layout", ["file", "folder"])
def test_eval_data_replaced_by_a_file_of_the_same_size_and_time_is_read_again(tmp_path, layout, monkeypatch):
    """The ``datasets`` cache keyed the data by path, size and modification time: a benchmark file replaced
    by another of the same size and time had its old questions scored."""
    monkeypatch.chdir(tmp_path)
    if layout == "file":
        data = tmp_path / "q.jsonl"
        source = data
    else:  # a local copy laid out like the hub repository
        source = tmp_path / "gsm8k"
        (source / "data").mkdir(parents=True)
        (source / "README.md").write_text((GSM8K / "README.md").read_text())
        data = source / "data" / "test.jsonl"
    golds = []
    for answer, out in [(111, "first.json"), (222, "second.json")]:
        _question_file(data, answer)
        assert main(["eval", "--model", "heuristic", "--data", f"gsm8k={source}", "--out", out]) == 0
        [item] = json.loads((tmp_path / out).read_text())["results"]["gsm8k"]["items"]
        golds.append(item["gold"])
    assert golds == ["111", "222"]


@pytest.mark.parametrize(
    "case, content, needle",
    [("garbage", b"\x00\xff\xfe not json at all\n", "q.jsonl' line 1 is not JSON"),
     ("truncated", b'{"question": "What is 1 + 1?", "answer": "#### 2"}\n{"question": "What is', "q.jsonl' line 2 is not JSON"),
     ("nested", b'{"question": "What is 1 + 1?", "answer": "#### 2"}\n' + b"[" * 5000 + b"]" * 5000 + b"\n",
      "q.jsonl' line 2 is nested more than 64 levels deep"),
     ("columns", b'{"question": "What is 1 + 1?", "answer": "#### 2"}\n{"foo": 1}\n', "q.jsonl' line 2 lacks what gsm8k needs"),
     ("array", b'[{"question": "What is 1 + 1?", "answer": "#### 2"}, {"quest', "q.json' is not JSON"),
     ("parquet", b"PAR1 this is not a parquet file", "q.parquet' cannot be read as parquet")],
)  # fmt: skip
def test_a_broken_eval_data_file_is_one_error_line_naming_the_file_and_line(tmp_path, capsys, case, content, needle):
    """Garbage, a truncated file or a wrong column was a 75-line ``DatasetGenerationError`` traceback (rc 1);
    a too-deep line or missing columns were an error that did not say which line."""
    path = tmp_path / {"array": "q.json", "parquet": "q.parquet"}.get(case, "q.jsonl")
    path.write_bytes(content)
    argv = ["eval", "--model", "heuristic", "--data", f"gsm8k={path}", "--out", str(tmp_path / "e.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert _one_line_error(err) and needle in err, err


def test_eval_limit_stops_reading_before_a_broken_line(tmp_path, capsys):
    """``--limit`` is honoured while reading: three questions, then a line of 17 MB of NUL bytes. The whole
    file went to ``datasets`` (a traceback); now the first three are scored and the fourth line never read,
    and without ``--limit`` that line is refused after its first 16 MiB."""
    path = tmp_path / "q.jsonl"
    with open(path, "wb") as f:
        for answer in (1, 2, 3):
            f.write(json.dumps({"question": f"What is {answer} + 0?", "answer": f"#### {answer}"}).encode() + b"\n")
        f.seek(f.tell() + (17 << 20))
        f.write(b"\n")
    out = tmp_path / "e.json"
    assert main(["eval", "--model", "heuristic", "--data", f"gsm8k={path}", "--limit", "3", "--out", str(out)]) == 0
    assert [i["gold"] for i in json.loads(out.read_text())["results"]["gsm8k"]["items"]] == ["1", "2", "3"]
    capsys.readouterr()
    assert main(["eval", "--model", "heuristic", "--data", f"gsm8k={path}", "--out", str(tmp_path / "f.json")]) == 2
    err = capsys.readouterr().err
    assert _one_line_error(err) and "q.jsonl' line 4 is longer than 16,777,216 bytes" in err, err


def test_gpqa_as_its_hub_csv_is_read_and_a_broken_csv_is_one_error(tmp_path):
    """GPQA's hub files are CSV: a local copy reads as they come, and NUL bytes are one error naming the line."""
    import csv

    from spyrl.evaluation.benchmarks import load_items

    good = tmp_path / "gpqa_diamond.csv"
    with good.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, ["Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
                                    "Incorrect Answer 3", "Explanation"])  # fmt: skip
        writer.writeheader()
        for k in range(3):
            writer.writerow({"Question": f"What is {k} + 1,\nsaid twice?", "Correct Answer": str(k + 1),
                             "Incorrect Answer 1": "x", "Incorrect Answer 2": "y", "Incorrect Answer 3": "z",
                             "Explanation": "counting"})  # fmt: skip
    items = load_items("gpqa_diamond", path=str(good))
    assert len(items) == 3 and "said twice?" in items[0].prompt
    broken = tmp_path / "broken.csv"
    broken.write_bytes(good.read_bytes() + b'"unterminated\x00' + b"\x00" * 1000)
    with pytest.raises(ValueError, match=r"broken\.csv' line \d+ is not CSV") as info:
        load_items("gpqa_diamond", path=str(broken))
    assert "\n" not in str(info.value)
