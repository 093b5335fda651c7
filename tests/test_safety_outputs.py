"""Safety, issue #63 items 3, 5 and 6: what a run writes, fresh or resumed, never goes through a link;
a refusal leaves nothing behind (no staging folder, no temporary file); ``--overwrite`` replaces only
what the command wrote before; a forged checkpoint state and a full disk are errors naming the file.

One tiny run (one iteration of a shrunk ``cpu-smoke``) is trained once per module; every test works
on its own copy of the run folder.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from spyrl.commands import main  # noqa: E402
from trainers import SpyRLConfig  # noqa: E402
from trainers import checkpoint as ckpt  # noqa: E402

SMALL = dict(
    iterations=1, checkpoint_every=1, keep_buffers=False, progress=False,
    documents_per_iteration=1, games_per_document=2, mini_batch_size=8, micro_batch_size=8,
)  # fmt: skip
# `spyrl train --resume latest` for one more iteration of the same small run
RESUME = ["train", "--preset", "cpu-smoke", "--resume", "latest", "--set", "iterations=2"] + [
    arg for key, value in SMALL.items() if key != "iterations" for arg in ("--set", f"{key}={value}")
]


def _config(out: Path, **overrides) -> SpyRLConfig:
    return SpyRLConfig.preset("cpu-smoke", output_dir=str(out), **{**SMALL, **overrides})


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    from trainers.grpo import SpyRLTrainer

    out = tmp_path_factory.mktemp("outputs") / "run"
    SpyRLTrainer(_config(out)).train()
    return out


@pytest.fixture
def run(trained_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(trained_run, out, symlinks=True)
    return out


def _snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``: a file's bytes, a link's target, a folder's mark."""
    entries: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        entries[name] = f"-> {os.readlink(path)}" if path.is_symlink() else path.read_bytes() if path.is_file() else "/"
    return entries


def _one_line_error(err: str) -> bool:
    return err.startswith("error:") and len(err.strip().splitlines()) == 1


def _resume(run: Path, capsys) -> tuple[int, str]:
    code = main([*RESUME, "--output-dir", str(run)])
    return code, capsys.readouterr().err


# ------------------------------------------------------------------ item 3: no output through a link
def test_resume_with_a_dangling_metrics_link_writes_nothing_outside_the_run(run, tmp_path, capsys):
    """Item 3: ``metrics.jsonl`` a dangling link: ``--resume latest`` appended the new iteration's row
    to the link's target, outside the run folder (``truncate`` skipped a missing file, ``log`` opened
    with ``"a"``, which follows links)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(outside / "metrics.jsonl")
    before = _snapshot(run)
    code, err = _resume(run, capsys)
    assert code == 2, err[-2000:]
    assert _one_line_error(err) and "metrics.jsonl" in err and "symbolic link" in err
    assert list(outside.iterdir()) == []  # nothing written through the link
    assert _snapshot(run) == before  # nor in the run: no row, no checkpoint, no staging folder


@pytest.mark.parametrize("name", ["buffers", "checkpoints", "metrics.jsonl"])
def test_a_fresh_run_refuses_a_linked_output_before_it_writes(tmp_path, name):
    """Item 3, fresh runs: a ``buffers`` (or ``checkpoints``) folder linked elsewhere received the run's
    buffers (checkpoints); a ``metrics.jsonl`` linked to a file elsewhere was appended to."""
    from trainers.grpo import SpyRLTrainer

    out, outside = tmp_path / "run", tmp_path / "elsewhere"
    out.mkdir()
    outside.mkdir()
    target = outside / "notes.txt" if name == "metrics.jsonl" else outside
    if name == "metrics.jsonl":
        target.write_text("mine\n")
    (out / name).symlink_to(target)
    with pytest.raises(ValueError, match=rf"{name}' is a symbolic link"):
        SpyRLTrainer(_config(out, keep_buffers=True))
    assert sorted(p.name for p in outside.iterdir()) == (["notes.txt"] if name == "metrics.jsonl" else [])
    assert [p.name for p in out.iterdir()] == [name]


def test_metrics_are_never_appended_through_a_link(tmp_path):
    """Item 3: the appender itself opens ``metrics.jsonl`` without following a link, checked on the
    descriptor, so a link swapped in after the trainer started is refused too, and so is a file
    hard-linked from elsewhere."""
    from trainers.sinks import MetricSinks

    run, victim = tmp_path / "run", tmp_path / "victim.txt"
    victim.write_text("precious\n")
    sinks = MetricSinks(run, ["jsonl"], {})
    sinks.log({"iteration": 1})
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(victim)  # swapped in during the run
    with pytest.raises(ValueError, match=r"metrics\.jsonl' is a symbolic link"):
        sinks.log({"iteration": 2})
    (run / "metrics.jsonl").unlink()
    os.link(victim, run / "metrics.jsonl")
    with pytest.raises(ValueError, match=r"metrics\.jsonl' has 2 hard links"):
        sinks.log({"iteration": 2})
    with pytest.raises(ValueError, match=r"metrics\.jsonl' has 2 hard links"):
        MetricSinks(run, ["jsonl"], {})
    assert victim.read_text() == "precious\n"


# ------------------------------------------------------- planted checkpoint links, leftovers
def test_a_planted_checkpoint_link_is_one_line_and_leaves_no_staging_folder(run, tmp_path, capsys):
    """Item 3 (pass finding): a ``checkpoints/iter_00002`` link stopped the run with a bare
    ``[Errno 20]`` after an iteration and left ``.tmp_iter_00002_*`` behind."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (run / "checkpoints" / "iter_00002").symlink_to(outside, target_is_directory=True)
    before = _snapshot(run)
    code, err = _resume(run, capsys)
    assert code == 2, err[-2000:]
    assert _one_line_error(err) and "iter_00002' is a symbolic link" in err and "Errno" not in err
    assert list(outside.iterdir()) == []
    assert _snapshot(run) == before  # no .tmp_iter_*, no metrics row, nothing


@pytest.mark.parametrize("planted", ["link", "folder"])
def test_a_save_replaces_only_a_checkpoint_and_cleans_up_on_refusal(run, tmp_path, planted):
    """Item 3, at save time: a link planted while the run trains, or a folder that is not a checkpoint,
    at ``checkpoints/iter_K`` is refused by name; the folder was deleted, the link stopped the save with
    ``[Errno 20]``; either way the staging folder stayed."""
    from trainers.grpo import SpyRLTrainer

    trainer = SpyRLTrainer.from_checkpoint(_config(run, iterations=2))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "thesis.tex").write_text("years of work")
    target = run / "checkpoints" / "iter_00002"
    if planted == "link":
        target.symlink_to(outside, target_is_directory=True)
    else:
        shutil.copytree(outside, target)
    trainer.iteration = 2
    message = "is a symbolic link" if planted == "link" else "is not a checkpoint"
    with pytest.raises(ValueError, match=rf"iter_00002'? {message}"):
        trainer.save_checkpoint()
    assert not list((run / "checkpoints").glob(".tmp_*"))
    assert (outside / "thesis.tex").read_text() == "years of work"
    if planted == "folder":
        assert (target / "thesis.tex").read_text() == "years of work"
    assert (run / "checkpoints" / "latest").read_text() == "iter_00001"


# ------------------------------------------------------------- item 5: a forged trainer state
@pytest.mark.parametrize(
    "field, forge",
    [
        ("iteration", lambda state: state.update(iteration=-1)),  # 'expected non-negative integer'
        ("metrics_rows", lambda state: state.update(metrics_rows="3")),
        ("rng", lambda state: state["rng"]["python"].__setitem__(1, [-1] * 625)),  # an OverflowError
    ],
    ids=["negative-iteration", "text-rows", "negative-rng"],
)
def test_a_forged_trainer_state_names_the_file_and_the_field(run, capsys, field, forge):
    """Item 5: a ``trainer_state.json`` forged with its manifest rewritten resumed, then failed in the
    first rollout with ``expected non-negative integer`` (the seed of iteration -1), naming neither the
    file nor the field; a forged RNG state was a traceback."""
    folder = run / "checkpoints" / "iter_00001"
    state = json.loads((folder / "trainer_state.json").read_text())
    forge(state)
    (folder / "trainer_state.json").write_text(json.dumps(state))
    ckpt.write_manifest(folder)  # whoever forges a checkpoint can write its manifest too
    before = _snapshot(run)
    code, err = _resume(run, capsys)
    assert code == 2, err[-2000:]
    assert _one_line_error(err)
    assert "trainer_state.json" in err and f"field {field!r}" in err
    assert _snapshot(run) == before


# ----------------------------------------------------- item 6: --overwrite replaces only its own
class _Saves:
    """Writes what ``save_pretrained`` writes (a config and weights) into the folder it is given."""

    def __init__(self, text: str = "{}") -> None:
        self.text = text

    def save_pretrained(self, folder):
        (Path(folder) / "config.json").write_text(self.text)
        (Path(folder) / "model.safetensors").write_bytes(b"weights")


def _thesis(folder: Path) -> dict[str, bytes | str]:
    (folder / "chapters").mkdir(parents=True)
    (folder / "thesis.tex").write_text("years of work")
    (folder / "chapters" / "one.tex").write_text("chapter one")
    return _snapshot(folder)


def test_overwrite_replaces_a_saved_model_and_nothing_else(tmp_path):
    """Item 6: ``save_pretrained(X, overwrite=True)`` deleted whatever folder X was, a thesis included."""
    from spy_env.io import save_pretrained

    thesis = tmp_path / "thesis"
    before = _thesis(thesis)
    with pytest.raises(
        ValueError, match=r"thesis' holds the folder 'chapters'.*--overwrite replaces only a model folder"
    ):
        save_pretrained(thesis, _Saves(), overwrite=True)
    assert _snapshot(thesis) == before
    (thesis / "chapters" / "one.tex").unlink()
    (thesis / "chapters").rmdir()  # a folder of plain files of someone's own is refused alike
    with pytest.raises(ValueError, match=r"thesis' holds 'thesis\.tex'"):
        save_pretrained(thesis, _Saves(), overwrite=True)
    assert (thesis / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis"]  # no staging folder left
    model = tmp_path / "model"
    save_pretrained(model, _Saves("old"))
    save_pretrained(model, _Saves("new"), overwrite=True)  # what the command wrote before: replaced
    assert (model / "config.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "thesis"]


def test_a_real_saved_model_and_adapter_can_be_overwritten(tiny_model_dir, tmp_path):
    """Item 6: what transformers' and peft's ``save_pretrained`` write is recognised as a saved model,
    and a file added to it afterwards is not (the folder is no longer only what the command wrote)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from spy_env.io import save_pretrained

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    saved = [tmp_path / "model"]
    save_pretrained(saved[0], model, tokenizer)
    peft = pytest.importorskip("peft")
    adapter = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj"]))
    saved.append(save_pretrained(tmp_path / "adapter", adapter, tokenizer))
    for folder in saved:
        save_pretrained(folder, model, tokenizer, overwrite=True)
    (saved[0] / "notes.md").write_text("mine")
    with pytest.raises(ValueError, match=r"model' holds 'notes\.md'"):
        save_pretrained(saved[0], model, tokenizer, overwrite=True)
    assert (saved[0] / "notes.md").read_text() == "mine"


def test_save_model_overwrite_refuses_a_folder_it_did_not_write_before_it_trains(tmp_path, monkeypatch, capsys):
    """Item 6: ``smollm2_selfplay.py --save-model X --overwrite`` replaced ``X/heuristic`` whatever it was,
    after hours of training; a folder that is not a saved model is refused by name before the training."""
    from tests.helpers import experiment_module

    experiment = experiment_module("smollm2_selfplay")
    monkeypatch.setattr(experiment, "run_row", lambda *a: pytest.fail("the training started"))
    out = tmp_path / "out"
    before = _thesis(out / "models" / "heuristic")
    argv = ["--out", str(out), "--rows", "heuristic", "--quick", "--save-model", str(out / "models"), "--overwrite"]
    assert experiment.main(argv) == 2
    err = capsys.readouterr().err
    assert "--save-model folder" in err and "heuristic' holds the folder 'chapters'" in err
    assert _snapshot(out / "models" / "heuristic") == before


# ------------------------------------------------------------------ item 6: a full disk
def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_names_the_output_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    """Item 6: a write that failed for want of space said ``[Errno 28] No space left on device`` and
    nothing else, for every output written by ``write_text`` / ``atomic_path``."""
    from spy_env.io import write_text

    monkeypatch.setattr(Path, "write_text", _disk_full)
    with pytest.raises(OSError, match=r"No space left on device: '.*results\.json'") as raised:
        write_text(tmp_path / "results.json", "{}")
    assert raised.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["state", "tensors"])
def test_a_full_disk_during_a_save_names_the_checkpoint_and_removes_its_staging(run, monkeypatch, where):
    """Item 6: a checkpoint save that ran out of space said ``[Errno 28]`` alone (the JSON state) or
    raised safetensors' own error, a traceback (the tensors), and left its staging folder behind."""
    import safetensors.torch
    from safetensors import SafetensorError

    from trainers.grpo import SpyRLTrainer

    trainer = SpyRLTrainer.from_checkpoint(_config(run, iterations=2))
    trainer.iteration = 2

    def rust_disk_full(*args, **kwargs):  # what safetensors raises: its own error, the OS error as text
        raise SafetensorError('Error while serializing: I/O error: No space left on device (os error 28) at path "x"')

    if where == "state":
        monkeypatch.setattr(Path, "write_text", _disk_full)
    else:
        monkeypatch.setattr(safetensors.torch, "save_file", rust_disk_full)
    with pytest.raises(OSError, match=r"No space left on device: '.*checkpoints/iter_00002'") as raised:
        trainer.save_checkpoint()
    assert raised.value.errno == errno.ENOSPC
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_00001", "latest"]


def test_a_full_disk_while_logging_metrics_is_one_line_naming_the_file(run, monkeypatch, capsys):
    """Item 6, through the CLI: ``error: [Errno 28] No space left on device`` named no file."""
    monkeypatch.setattr(os, "fsync", _disk_full)  # where an append meets a full disk (NFS, delayed allocation)
    code, err = _resume(run, capsys)
    assert code == 2, err[-2000:]
    assert _one_line_error(err) and "No space left on device" in err and "metrics.jsonl" in err


@pytest.mark.parametrize("command", ["rollout", "train"])
def test_a_link_to_nothing_at_an_output_is_refused_by_what_it_is(tmp_path, capsys, command):
    """A dangling link at a new output was refused as "exists (another command is writing it?)"."""
    target = tmp_path / "elsewhere" / "x.jsonl"
    if command == "rollout":
        (tmp_path / "out.jsonl").symlink_to(target)
        argv = ["rollout", "--agent", "heuristic", "--games", "1", "--out", str(tmp_path / "out.jsonl")]
    else:
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "metrics.jsonl").symlink_to(target)
        argv = ["train", "--preset", "cpu-smoke", "--set", f"output_dir={tmp_path / 'run'}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert _one_line_error(err) and "is a link to nothing" in err
    assert not target.parent.exists()


def test_vote_gradients_refuses_a_foreign_save_model_folder_before_it_trains(tmp_path):
    """lab/experiments/vote_gradients.py checked --save-model only as "exists"; with --overwrite it trained, then
    (since save_pretrained refuses) failed after the work."""
    import subprocess
    import sys

    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "ch1.tex").write_text("years of work")
    run = subprocess.run(
        [sys.executable, "lab/experiments/vote_gradients.py", "--save-model", str(thesis), "--overwrite",
         "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert run.returncode == 2 and _one_line_error(run.stderr) and "ch1.tex" in run.stderr
    assert (thesis / "ch1.tex").read_text() == "years of work" and not (tmp_path / "out").exists()
