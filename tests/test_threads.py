"""agents/threads.py: torch's CPU threads follow the cores that are free, on request or by default."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from agents import threads
from spyrl.commands import main


def test_busy_cores_are_not_counted_free():
    """A process spinning on every usable core leaves (almost) nothing free, whatever else runs."""
    cpus = threads.usable_cores()
    if threads.free_cores(0.01, cpus) is None:
        pytest.skip("no /proc/stat here")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in cpus]
    try:
        time.sleep(0.5)
        free = threads.free_cores(0.3, cpus)
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
    assert free is not None and 0.0 <= free < 0.5 * len(cpus)
    assert threads.choose_threads("auto", len(cpus), free) <= max(1, len(cpus) // 2)


@pytest.mark.parametrize("text", ["0", "-1", "two", "1.5", ""])
def test_a_bad_setting_is_refused_by_name(text, capsys):
    with pytest.raises(ValueError, match="--threads must be auto, all or a positive number"):
        threads.parse_threads(text)
    assert main(["play", "--agent", "heuristic", "--threads", text]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --threads") and "\n" not in err


def _threads_after_load(tiny_model_dir, **env) -> int:
    code = (
        "import torch; from agents.pretrained import load_pretrained; torch.set_num_threads(7);"
        f"load_pretrained({str(tiny_model_dir)!r}, dtype='float32', device='cpu'); print(torch.get_num_threads())"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("SPYRL_THREADS", "OMP_NUM_THREADS")}
    run = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return int(run.stdout.split()[-1])


@pytest.mark.slow
def test_a_cpu_model_loads_with_the_threads_the_setting_chooses(tiny_model_dir):
    cores = len(threads.usable_cores())
    assert _threads_after_load(tiny_model_dir, SPYRL_THREADS="1") == 1
    assert _threads_after_load(tiny_model_dir, SPYRL_THREADS="all") == cores
    assert 1 <= _threads_after_load(tiny_model_dir) <= cores  # auto: the free cores, at least one
    assert _threads_after_load(tiny_model_dir, OMP_NUM_THREADS="1") == 7  # OpenMP's own variable: left alone


def test_the_command_line_setting_reaches_the_processes_a_command_starts(monkeypatch, capsys):
    monkeypatch.setenv(threads.SETTING_ENV, "auto")  # restored after the test
    assert main(["play", "--agent", "heuristic", "--threads", "3"]) == 0
    assert os.environ[threads.SETTING_ENV] == "3"
    capsys.readouterr()
