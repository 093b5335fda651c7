"""Checkpoints that are data, not code: tensors in safetensors, everything else in JSON.

A checkpoint folder ``checkpoints/iter_K`` holds

- ``model/``: a plain Hugging Face folder (``model.safetensors`` or a LoRA adapter) and tokenizer;
- ``trainer_state.json`` and ``trainer_state.safetensors``: the rest of the trainer's state, as data
  (:mod:`trainers.trainer_state`: a forged field is refused naming the file and the field);
- ``accelerate/`` (multi-process runs only): what ``Accelerator.save_state`` writes (see docs/SAFETY.md:
  accelerate stores optimizer and RNG states with ``torch.save``);
- ``manifest.json``: the sha256 of every other file, written last.

:func:`save_trainer` writes a trainer's checkpoint (staged in a temporary folder, renamed into
place); :func:`opened_checkpoint` verifies one under the run's lock and :func:`load_trainer` restores
it into a freshly built trainer (:meth:`trainers.grpo.SpyRLTrainer.from_checkpoint` does both).

Nothing here is loaded with pickle. Resuming checks the manifest (a missing, extra or changed file
is an error naming it), that every file is a regular file of a data format (:data:`DATA_SUFFIXES`:
a ``pytorch_model.bin`` listed in the manifest is refused, not handed to ``torch.load``; a symbolic
link, to a file or a folder, is refused) and that every floating tensor is finite *before*
anything is loaded, so a corrupted checkpoint never resumes silently and never gets written over
the run.

Nothing a run writes goes through a link: a link among its outputs (:data:`RUN_OUTPUTS`, or in their
folders) is refused before a run, fresh or resumed, writes anything, and a save replaces only a
checkpoint (checked again then). A save that fails leaves no staging folder and names the checkpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from spy_env.io import check_tree, honour_umask, lock_run, parse_json, pid_alive, refuse_links, write_text, writing
from trainers.snapshots import optimizer_from_flat, optimizer_to_flat, restore_rng, rng_snapshot
from trainers.trainer_state import FORMAT, STATE_FILE, TENSORS_FILE, CheckpointError, read_state, restoring, write_state

logger = logging.getLogger(__name__)

__all__ = [
    "MANIFEST_FILE",
    "STATE_FILE",
    "TENSORS_FILE",
    "CheckpointError",
    "check_finite_files",
    "first_non_finite",
    "hold_run_folder",
    "load_trainer",
    "open_checkpoint",
    "opened_checkpoint",
    "optimizer_from_flat",
    "optimizer_to_flat",
    "read_state",
    "remove_stale_staging",
    "resolve_checkpoint",
    "restore_rng",
    "rng_snapshot",
    "save_trainer",
    "verify_manifest",
    "write_manifest",
    "write_state",
]

MANIFEST_FILE = "manifest.json"
# What a checkpoint may hold outside accelerate/: never a pickle format (.bin, .pt, .pkl, ...)
DATA_SUFFIXES = frozenset({".safetensors", ".json", ".txt", ".model", ".jinja", ".md"})
# What a run writes into its folder (the trainer, its checkpoints, `spyrl train`'s chart)
RUN_OUTPUTS = ("metrics.jsonl", "curves.png", "checkpoints", "buffers", "tiny-model", "tensorboard")


# ------------------------------------------------------------------------------ locating
def resolve_checkpoint(root: Path, path: str) -> Path:
    """The checkpoint folder ``path`` names (``"latest"`` reads ``root/latest``)."""
    if path == "latest":
        pointer = root / "latest"
        if not pointer.is_file():
            raise CheckpointError(f"no checkpoint to resume from in {root} (no 'latest' file)")
        name = pointer.read_text(encoding="utf-8", errors="replace").strip()
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise CheckpointError(f"{pointer} does not name a checkpoint folder: {name!r}")
        folder = root / name
        if not folder.is_dir():
            raise CheckpointError(f"{pointer} points to {folder}, which does not exist")
        return folder
    folder = Path(path)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist")
    return folder


def remove_stale_staging(root: Path) -> None:
    """Remove ``.tmp_iter_*_PID`` staging folders of processes that died mid-save."""
    if not root.is_dir():
        return
    for folder in root.glob(".tmp_iter_*_*"):
        pid = folder.name.rsplit("_", 1)[-1]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def open_checkpoint(root: Path, path: str) -> Path:
    """Resolve ``path`` (or ``"latest"``), then verify its manifest and that its tensors are finite."""
    folder = resolve_checkpoint(root, path)
    try:
        check_tree(folder, DATA_SUFFIXES, free="accelerate")
    except ValueError as e:
        raise CheckpointError(f"{e}; resume reads weights only from safetensors") from e
    verify_manifest(folder)
    check_finite_files(folder)
    return folder


def hold_run_folder(owner: object, folder: str | os.PathLike) -> Path:
    """``folder`` (created), locked for this process until ``owner`` is gone (:func:`spy_env.io.lock_run`):
    every writer of a run, fresh or resumed, takes it before it writes, and a link among the run's
    outputs is refused then. Under a launcher rank 0 holds it for all ranks."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if _rank() == 0:
        weakref.finalize(owner, lock_run(folder).release)
        refuse_links(folder, RUN_OUTPUTS)  # once held: nothing is written yet
    return folder


@contextlib.contextmanager
def opened_checkpoint(run: str | os.PathLike, path: str) -> Iterator[Path]:
    """The checkpoint ``path`` (or ``"latest"``) of the run folder ``run``, verified by
    :func:`open_checkpoint` while this process holds the run (rank 0 under a launcher), so that no
    other writer replaces it while it is read; the hold ends with the block (a trainer built inside
    takes its own)."""
    run = Path(run)
    hold = lock_run(run) if _rank() == 0 and run.is_dir() else None  # a missing run: the checkpoint's error
    try:
        yield open_checkpoint(run / "checkpoints", path)
    finally:
        if hold is not None:
            hold.release()


def _rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


# ------------------------------------------------------------------------------ manifest
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path) -> list[str]:
    return sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_FILE
    )


def write_manifest(folder: Path) -> None:
    """Write ``manifest.json``: the sha256 of every file under ``folder``."""
    manifest = {"format": FORMAT, "sha256": {name: _sha256(folder / name) for name in _files(folder)}}
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")


def verify_manifest(folder: Path) -> None:
    """Raise :class:`CheckpointError` naming the first file that is missing, extra or altered."""
    path = folder / MANIFEST_FILE
    if not path.is_file():
        old = (
            " (written by an older spyrl with pickle, which is no longer loaded)"
            if (folder / "trainer_state.pt").exists()
            else ""
        )
        raise CheckpointError(f"{path} is missing{old}; refusing to resume from {folder}")
    try:
        manifest = parse_json(path.read_text(encoding="utf-8"), str(path))
        expected = manifest["sha256"]
        if not isinstance(expected, dict):
            raise TypeError("sha256 is not a mapping")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not a valid manifest ({e})") from e
    present = set(_files(folder))
    for name in sorted(expected):
        if name not in present:
            raise CheckpointError(f"{folder / name} is missing (listed in {path})")
        if _sha256(folder / name) != expected[name]:
            raise CheckpointError(f"{folder / name} does not match its sha256 in {path} (corrupted or altered)")
    extra = sorted(present - set(expected))
    if extra:
        raise CheckpointError(f"{folder / extra[0]} is not listed in {path} (added after the checkpoint was written)")


# ---------------------------------------------------------------------------- finiteness
def check_finite_files(folder: Path) -> None:
    """Every floating tensor of every ``*.safetensors`` file under ``folder`` is finite."""
    from safetensors import SafetensorError, safe_open

    for path in sorted(folder.rglob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                    tensor = f.get_tensor(key)
                    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                        raise CheckpointError(f"{path} holds non-finite values (tensor {key!r}); refusing to resume")
        except (SafetensorError, OSError, RuntimeError) as e:
            raise CheckpointError(f"{path} is not a readable safetensors file ({e})") from e


def first_non_finite(model: torch.nn.Module) -> str | None:
    """The name of the first parameter (of this process's share) holding NaN or inf, else None."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.is_floating_point() and not bool(torch.isfinite(p).all()):
                return name
    return None


# ------------------------------------------------------------------------ a trainer's checkpoint
class Checkpointed(Protocol):
    """What a checkpoint reads and restores of a trainer (:class:`trainers.grpo.SpyRLTrainer` is
    one); declared here so this module does not import the trainer that imports it."""

    output_dir: Path
    iteration: int
    distributed: bool
    accelerator: Any  # accelerate.Accelerator
    model: Any  # the (possibly wrapped) torch module
    optimizer: Any  # torch.optim.Optimizer
    scheduler: Any  # torch.optim.lr_scheduler.LRScheduler
    tokenizer: Any
    controller: Any  # trainers.algorithm.StageController
    rae: Any  # trainers.algorithm.RAEBaselines
    sinks: Any  # trainers.metrics.MetricSinks
    config: Any  # trainers.config.SpyRLConfig

    @property
    def unwrapped(self) -> Any: ...

    def all_reduce(self, values: Sequence[float], op: str = ...) -> list[float]: ...


def save_trainer(trainer: Checkpointed) -> Path:
    """Write ``trainer``'s checkpoint to ``checkpoints/iter_K`` atomically; every process calls it. A
    link in ``checkpoints`` (or the folder itself), or an ``iter_K`` that is not a checkpoint, is refused
    by name; a save that fails leaves no staging folder and is an error naming ``iter_K``."""
    root = trainer.output_dir / "checkpoints"
    target = root / f"iter_{trainer.iteration:05d}"
    main = trainer.accelerator.is_main_process
    # one staging folder for every process (they all write into it), renamed into place at the end
    tmp = root / f".tmp_iter_{trainer.iteration:05d}{'' if trainer.distributed else f'_{os.getpid()}'}"
    _refuse_non_finite(trainer)
    if main:
        _check_target(trainer.output_dir, target)
        remove_stale_staging(root)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    try:
        with writing(target, tmp):
            state_dict = None
            if trainer.distributed:
                trainer.accelerator.wait_for_everyone()
                # Collective. Model and optimizer as accelerate saves them for DDP, FSDP (shards) or
                # DeepSpeed (engine checkpoint), plus every process's RNG states; and the full weights
                # gathered once more for a plain Hugging Face folder.
                trainer.accelerator.save_state(str(tmp / "accelerate"))
                state_dict = trainer.accelerator.get_state_dict(trainer.model)
                trainer.accelerator.wait_for_everyone()
            if main:  # the main process writes the rest; the others wait
                trainer.unwrapped.save_pretrained(tmp / "model", state_dict=state_dict)
                trainer.tokenizer.save_pretrained(tmp / "model")
                write_state(tmp, *_trainer_state(trainer))
                honour_umask(tmp)
                write_manifest(tmp)
                _check_target(trainer.output_dir, target)  # and what came there meanwhile
                shutil.rmtree(target, ignore_errors=True)  # a checkpoint after the one this run resumed from
                os.replace(tmp, target)
                write_text(root / "latest", target.name)
    except BaseException:
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    if trainer.distributed:
        trainer.accelerator.wait_for_everyone()
    return target


def _check_target(run: Path, target: Path) -> None:
    """A save writes into the run's own ``checkpoints`` folder and replaces only a checkpoint there."""
    refuse_links(run, ["checkpoints"])
    if target.exists() and not (target / MANIFEST_FILE).is_file():
        raise CheckpointError(f"{target} is not a checkpoint (it holds no {MANIFEST_FILE}); move it away")


def _refuse_non_finite(trainer: Checkpointed) -> None:
    """Never write NaN weights over the run; every process decides together (each may hold only a
    shard), so none waits for the others forever."""
    bad = first_non_finite(trainer.unwrapped)
    if trainer.distributed and trainer.all_reduce([float(bad is not None)])[0] and bad is None:
        bad = "a parameter of another process"
    if bad is not None:
        raise CheckpointError(f"parameter {bad} is not finite; checkpoint iter_{trainer.iteration:05d} not written")


def _trainer_state(trainer: Checkpointed) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The JSON state and tensors of ``trainer`` (the optimizer's only in one process: accelerate saves it else)."""
    rng, tensors = rng_snapshot()
    optimizer = None
    if not trainer.distributed:
        optimizer, optimizer_tensors = optimizer_to_flat(trainer.optimizer.state_dict())
        tensors.update(optimizer_tensors)
    state = {
        "format": FORMAT,
        "iteration": trainer.iteration,
        "distributed": trainer.distributed,
        "optimizer": optimizer,
        "scheduler": trainer.scheduler.state_dict(),
        "controller": trainer.controller.state_dict(),
        "rae": trainer.rae.state_dict(),
        "rng": rng,
        "config": trainer.config.to_dict(),
        "metrics_rows": trainer.sinks.rows_written,
    }
    return state, tensors


def load_trainer(trainer: Checkpointed, checkpoint: Path) -> None:
    """Restore ``trainer`` from a checkpoint folder that :func:`open_checkpoint` verified."""
    state, tensors = read_state(checkpoint)
    _load_weights(trainer, checkpoint, state)
    path = checkpoint / STATE_FILE
    if not trainer.distributed:
        with restoring(path, "optimizer"):
            trainer.optimizer.load_state_dict(optimizer_from_flat(state["optimizer"], tensors, trainer.optimizer))
        with restoring(path, "rng"):
            restore_rng(state["rng"], tensors)
    for field, part in (("scheduler", trainer.scheduler), ("controller", trainer.controller), ("rae", trainer.rae)):
        with restoring(path, field):
            part.load_state_dict(state[field])
    trainer.iteration = state["iteration"]
    trainer.sinks.truncate(state["metrics_rows"])
    logger.info("resumed from %s at iteration %d", checkpoint, trainer.iteration)


def _load_weights(trainer: Checkpointed, checkpoint: Path, state: Mapping[str, Any]) -> None:
    if trainer.distributed:
        if not state["distributed"]:
            raise CheckpointError(f"{checkpoint} was written by a single process; resume it with one process")
        trainer.accelerator.load_state(str(checkpoint / "accelerate"))  # model, optimizer, per-process RNG
    elif state["distributed"]:
        raise CheckpointError(f"{checkpoint} was written by several processes; resume it under the same launcher")
    elif trainer.config.model.lora_r:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(trainer.unwrapped, load_file(str(checkpoint / "model" / "adapter_model.safetensors")))
    else:
        from transformers import AutoModelForCausalLM

        loaded = AutoModelForCausalLM.from_pretrained(
            checkpoint / "model", dtype=next(trainer.model.parameters()).dtype, use_safetensors=True
        )
        trainer.unwrapped.load_state_dict(loaded.state_dict())
