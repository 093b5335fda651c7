"""Checkpoints are data, not code: no pickle, a sha256 manifest, non-finite weights refused.

One tiny run (one iteration of a shrunk ``cpu-smoke``) is trained once per module; every test
works on its own copy of the run folder.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trainers import SpyRLConfig  # noqa: E402
from trainers import checkpoint as ckpt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(
    iterations=1, checkpoint_every=1, keep_buffers=False, progress=False,
    documents_per_iteration=1, games_per_document=2, mini_batch_size=8, micro_batch_size=8,
)  # fmt: skip


def _config(out: Path, **overrides) -> SpyRLConfig:
    return SpyRLConfig.preset("cpu-smoke", output_dir=str(out), **{**SMALL, **overrides})


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    from trainers.grpo import SpyRLTrainer

    out = tmp_path_factory.mktemp("ckpt") / "run"
    trainer = SpyRLTrainer(_config(out))
    trainer.train()
    return out, trainer


@pytest.fixture
def run(trained_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(trained_run[0], out)
    return out


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _resume(out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    args = ["train", "--preset", "cpu-smoke", "--output-dir", str(out), "--resume", "latest", "--set", "progress=false"]
    return subprocess.run(
        [sys.executable, "-m", "spyrl", *args, *extra], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env
    )


def test_a_checkpoint_is_safetensors_json_and_a_manifest(run):
    folder = run / "checkpoints" / "iter_00001"
    names = {p.name for p in folder.iterdir()}
    assert {"manifest.json", "trainer_state.json", "trainer_state.safetensors", "model"} <= names
    assert not [p for p in run.rglob("*") if p.suffix in (".pt", ".pkl", ".bin")]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(manifest["sha256"]) == {
        p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != "manifest.json"
    }
    state = json.loads((folder / "trainer_state.json").read_text())  # plain JSON, no pickle
    assert state["iteration"] == 1 and state["format"] == ckpt.FORMAT


def test_resume_restores_optimizer_rng_and_state_exactly(trained_run, run):
    import random

    import numpy as np

    from trainers.grpo import SpyRLTrainer

    trainer = trained_run[1]
    saved_rng = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    resumed = SpyRLTrainer.from_checkpoint(_config(run))
    assert resumed.iteration == 1
    a, b = trainer.optimizer.state_dict(), resumed.optimizer.state_dict()
    assert a["param_groups"] == b["param_groups"]
    for pid, entry in a["state"].items():
        for key, value in entry.items():
            assert torch.equal(value, b["state"][pid][key]), (pid, key)
    for (name, p), (_, q) in zip(trainer.model.named_parameters(), resumed.model.named_parameters(), strict=True):
        assert torch.equal(p, q), name
    assert resumed.rae.state_dict() == trainer.rae.state_dict()
    assert resumed.controller.state_dict() == trainer.controller.state_dict()
    # the RNG states are those at save time (the trainer saved right after its last iteration)
    assert random.getstate() == saved_rng[0]
    assert (np.random.get_state()[1] == saved_rng[1]).all()
    assert torch.equal(torch.get_rng_state(), saved_rng[2])


def test_from_checkpoint_leaves_the_run_held_by_its_trainer_alone(run):
    """The hold ``from_checkpoint`` takes to verify the checkpoint ends with it; the resumed trainer's own
    hold lasts as long as the trainer (a hold left behind would keep the run locked after it)."""
    import gc

    from trainers.grpo import SpyRLTrainer

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    probe = [sys.executable, "-c", "import sys; from spy_env.io import lock_run; lock_run(sys.argv[1])", str(run)]
    trainer = SpyRLTrainer.from_checkpoint(_config(run))
    held = subprocess.run(probe, capture_output=True, text=True, env=env, timeout=120)
    assert held.returncode == 1 and f"being written by another process (pid {os.getpid()})" in held.stderr
    del trainer
    gc.collect()
    free = subprocess.run(probe, capture_output=True, text=True, env=env, timeout=120)
    assert free.returncode == 0, free.stderr[-500:]


class _Payload:
    """Unpickling this runs a command: what a crafted ``trainer_state.pt`` did to ``--resume``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_payload_in_a_checkpoint_is_never_executed(run, tmp_path):
    """Finding 1: ``torch.load(weights_only=False)`` ran a crafted file's code on ``--resume latest``."""
    marker = tmp_path / "pwned"
    folder = run / "checkpoints" / "iter_00001"
    for name in ("trainer_state.pt", "trainer_state.json"):  # both the old and the new state name
        target = folder / name
        target.unlink(missing_ok=True)
        with target.open("wb") as f:
            pickle.dump({"iteration": _Payload(marker)}, f)
    ckpt.write_manifest(folder)  # whoever crafts a checkpoint can also write its manifest
    proc = _resume(run)
    assert not marker.exists(), "the checkpoint executed code"
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "trainer_state" in proc.stdout + proc.stderr


def test_a_flipped_bit_in_the_weights_is_refused_and_nothing_is_written(run):
    """Finding 3: a same-size bit flip in ``model.safetensors`` resumed silently (rc 0)."""
    weights = run / "checkpoints" / "iter_00001" / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x40  # inside the last tensor's bytes, same size
    weights.write_bytes(bytes(data))
    before = _snapshot(run)
    proc = _resume(run, "--set", "iterations=2")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out
    assert "model.safetensors" in out and "sha256" in out
    assert _snapshot(run) == before  # nothing written over the run


def test_non_finite_weights_with_a_matching_manifest_are_refused(run):
    from safetensors.torch import load_file, save_file

    folder = run / "checkpoints" / "iter_00001"
    weights = folder / "model" / "model.safetensors"
    tensors = load_file(str(weights))
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] = float("nan")
    save_file(tensors, str(weights), metadata={"format": "pt"})
    ckpt.write_manifest(folder)
    with pytest.raises(ckpt.CheckpointError, match=r"model\.safetensors holds non-finite values"):
        ckpt.open_checkpoint(run / "checkpoints", "latest")


def test_saving_non_finite_weights_is_refused(trained_run):
    trainer = trained_run[1]
    param = next(trainer.model.parameters())
    old = param.detach().clone()
    try:
        with torch.no_grad():
            param.view(-1)[0] = float("inf")
        with pytest.raises(ckpt.CheckpointError, match="is not finite; checkpoint iter_00001 not written"):
            trainer.save_checkpoint()
    finally:
        with torch.no_grad():
            param.copy_(old)
    assert (trainer.output_dir / "checkpoints" / "latest").read_text() == "iter_00001"


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda f: (f / "trainer_state.json").write_text('{"iterat'), "sha256"),  # truncated
        (lambda f: (f / "trainer_state.json").unlink(), "trainer_state.json is missing"),
        (lambda f: (f / "trainer_state.safetensors").unlink(), "trainer_state.safetensors is missing"),
        (lambda f: (f / "manifest.json").unlink(), "manifest.json is missing"),
        (lambda f: (f / "manifest.json").write_text("[1, 2"), "not a valid manifest"),
        (lambda f: (f.parent / "latest").write_text("iter_09999"), "does not exist"),
        (lambda f: (f.parent / "latest").write_text("../../etc"), "does not name a checkpoint"),
        (lambda f: shutil.rmtree(f.parent), "no checkpoint to resume from"),
    ],
    ids=[
        "truncated-state",
        "missing-state",
        "missing-tensors",
        "no-manifest",
        "bad-manifest",
        "latest-nowhere",
        "latest-escapes",
        "empty-run",
    ],
)
def test_damaged_checkpoints_are_one_line_errors(run, damage, message):
    """Finding 4 (checkpoint cases): each was a traceback; now ``error: ...`` and exit code 2."""
    from spyrl.commands import main

    damage(run / "checkpoints" / "iter_00001")
    with pytest.raises(ckpt.CheckpointError, match=message):
        ckpt.open_checkpoint(run / "checkpoints", "latest")
    code = main(["train", "--preset", "cpu-smoke", "--output-dir", str(run), "--resume", "latest"])
    assert code == 2


def test_truncated_state_with_a_matching_manifest_is_an_error(run):
    folder = run / "checkpoints" / "iter_00001"
    (folder / "trainer_state.json").write_text('{"iterat')
    ckpt.write_manifest(folder)
    ckpt.open_checkpoint(run / "checkpoints", "latest")  # the files match their manifest ...
    with pytest.raises(ckpt.CheckpointError, match="cannot be read"):
        ckpt.read_state(folder)  # ... but the state is not JSON


def test_stale_staging_folders_of_dead_processes_are_removed(trained_run, tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    root = trained_run[0] / "checkpoints"
    stale = root / f".tmp_iter_00007_{proc.pid}"
    stale.mkdir()
    live = root / f".tmp_iter_00007_{os.getpid()}"
    live.mkdir()
    try:
        ckpt.remove_stale_staging(root)
        assert not stale.exists() and live.exists()
    finally:
        shutil.rmtree(live, ignore_errors=True)


# ---------------------------------------------------------- resume reads only data (pass 3)
def _fake_checkpoint(tmp_path: Path) -> Path:
    from safetensors.torch import save_file

    root = tmp_path / "checkpoints"
    folder = root / "iter_00001"
    (folder / "model").mkdir(parents=True)
    save_file({"w": torch.zeros(2)}, str(folder / "model" / "model.safetensors"))
    (folder / "model" / "config.json").write_text("{}")
    (root / "latest").write_text("iter_00001")
    ckpt.write_manifest(folder)
    return folder


@pytest.mark.parametrize("name", ["pytorch_model.bin", "optimizer.pt", "x.pkl"])
def test_a_pickle_weights_file_listed_in_the_manifest_is_refused(tmp_path, name):
    """Pass 3, item 4: a ``pytorch_model.bin`` listed in the manifest went to ``torch.load``."""
    folder = _fake_checkpoint(tmp_path)
    ckpt.open_checkpoint(folder.parent, "latest")  # a data-only checkpoint passes
    (folder / "model" / name).write_bytes(pickle.dumps({"w": 1}))
    ckpt.write_manifest(folder)  # a forger rewrites the manifest too
    with pytest.raises(ckpt.CheckpointError, match=f"{name} is not a data file"):
        ckpt.open_checkpoint(folder.parent, "latest")


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_symbolic_link_in_a_checkpoint_is_refused(tmp_path, kind):
    """Pass 3, Low: a symlinked folder in a checkpoint was neither listed nor refused."""
    folder = _fake_checkpoint(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.json").write_text("{}")
    if kind == "file":
        (folder / "model" / "tokenizer.json").symlink_to(elsewhere / "x.json")
    else:
        (folder / "model" / "extra").symlink_to(elsewhere, target_is_directory=True)
    ckpt.write_manifest(folder)
    with pytest.raises(ckpt.CheckpointError, match="symbolic link"):
        ckpt.open_checkpoint(folder.parent, "latest")


def test_checkpoint_files_honour_the_umask(trained_run):
    """Pass 3, Low: ``*.safetensors`` were written 0600 under umask 022."""
    import stat

    mask = os.umask(0o022)
    os.umask(mask)
    files = [p for p in (trained_run[0] / "checkpoints").rglob("*") if p.is_file()]
    assert any(p.suffix == ".safetensors" for p in files)
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in files} == {p.name: 0o666 & ~mask for p in files}
