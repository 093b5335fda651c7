"""Optional dependencies are found before the work: a missing one is one ``error:`` line at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spy_env.extras import Extra, missing, require
from trainers.config import SpyRLConfig
from trainers.extras import training_extras
from trainers.sections import ModelConfig

ROOT = Path(__file__).resolve().parents[1]


def spyrl_without(modules: list[str], *args: str) -> subprocess.CompletedProcess:
    """``spyrl ARGS`` in a fresh process in which ``modules`` cannot be imported (as if not installed)."""
    blocked = "".join(f"sys.modules[{m!r}] = None; " for m in modules)
    code = f"import sys; {blocked}from spyrl.commands import main; sys.exit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_train_without_the_plotting_extra_fails_before_the_first_iteration(tmp_path):
    out = tmp_path / "run"
    proc = spyrl_without(["matplotlib"], "train", "--preset", "cpu-smoke", "--output-dir", str(out))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert "the training curves needs matplotlib" in lines[0] and "pip install 'spyrl[train]'" in lines[0]
    assert not out.exists()  # nothing was built, trained or written
    assert "training tiny" not in proc.stdout


def test_train_names_every_missing_package_with_its_install_command(tmp_path):
    out = tmp_path / "run"
    proc = spyrl_without(
        ["peft", "wandb"],
        "train", "--preset", "cpu-smoke", "--output-dir", str(out), "--set", "lora_r=4", "--set", "report_to=[jsonl,wandb]",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "lora_r=4 needs peft" in line and "report_to wandb needs wandb" in line
    assert "pip install 'spyrl[train]' && pip install wandb" in line
    assert not out.exists()


def test_the_trainer_itself_checks_before_it_builds_anything(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)
    from trainers.grpo import SpyRLTrainer

    config = SpyRLConfig.preset("cpu-smoke", output_dir=str(tmp_path / "run"), lora_r=4, progress=False)
    with pytest.raises(ImportError, match=r"lora_r=4 needs peft: pip install 'spyrl\[train\]'"):
        SpyRLTrainer(config)
    assert not (tmp_path / "run").exists()


def test_eval_checks_its_scorer_and_charts_before_generating(tmp_path):
    data = tmp_path / "gsm8k.jsonl"
    data.write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    proc = spyrl_without(
        ["math_verify"], "eval", "--model", "heuristic", "--benchmarks", "gsm8k", "--data", f"gsm8k={data}",
        "--out", str(tmp_path / "results.json"),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == "error: scoring math benchmarks needs math_verify: pip install 'spyrl[eval]'"
    assert not (tmp_path / "results.json").exists()
    proc = spyrl_without(["matplotlib"], "eval", "--model", "heuristic", "--game", "--out-dir", str(tmp_path / "g"))
    assert proc.returncode == 2 and "chart.png needs matplotlib" in proc.stderr, proc.stderr
    assert not (tmp_path / "g" / "games.parquet").exists()


def test_extras_follow_the_config():
    def modules(report_to=("jsonl",), **model):
        return [extra.module for extra in training_extras(ModelConfig(**model), report_to, plots=False)]

    base = modules(name_or_path="tiny")
    assert base == ["torch", "transformers", "accelerate", "safetensors"]
    assert modules(name_or_path="smollm2") == [*base, "gguf"]
    assert modules(name_or_path="tiny", lora_r=8) == [*base, "peft"]
    assert modules(["jsonl", "console", "tensorboard", "trackio"], name_or_path="tiny") == [
        *base,
        "tensorboard",
        "trackio",
    ]
    plotted = training_extras(ModelConfig(name_or_path="tiny"), plots=True)
    assert plotted[-1].module == "matplotlib" and plotted[-1].install == "spyrl[train]"


def test_require_reports_each_missing_module_once_and_passes_when_all_are_there():
    absent = Extra("spyrl_no_such_module", "spyrl[train]", "the curves")
    assert missing([absent, Extra("json", "python", "buffers"), absent]) == [absent]
    assert missing([Extra("spyrl_no_such_package.sub", "x", "y")]) != []  # a missing parent is missing, not a crash
    require([Extra("json", "python", "buffers")])
    with pytest.raises(ImportError) as e:
        require([absent, Extra("spyrl_other_missing", "other", "a tracker")])
    assert str(e.value) == (
        "the curves needs spyrl_no_such_module; a tracker needs spyrl_other_missing: "
        "pip install 'spyrl[train]' && pip install other"
    )


@pytest.mark.parametrize("script", ["lab/experiments/smollm2_selfplay.py", "lab/experiments/vote_gradients.py"])
def test_experiments_check_their_chart_before_training(script, tmp_path):
    # as `python SCRIPT` runs it (its folder first on the import path), with matplotlib made unimportable
    code = f"import runpy, sys; sys.path.insert(0, 'lab/experiments'); sys.modules['matplotlib'] = None; sys.argv = [{script!r}, '--quick', '--out', {str(tmp_path / 'out')!r}]; runpy.run_path({script!r}, run_name='__main__')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert (
        proc.stderr.strip().splitlines()[-1]
        == "error: the training curves needs matplotlib: pip install 'spyrl[train]'"
    )
    assert not (tmp_path / "out").exists()
