"""Checkpoints that are data, not code: tensors in safetensors, everything else in JSON.

A checkpoint folder ``checkpoints/iter_K`` holds

- ``model/``: a plain Hugging Face folder (``model.safetensors`` or a LoRA adapter) and tokenizer;
- ``trainer_state.json``: iteration, scheduler, stage controller, RAE baselines, Python and NumPy
  RNG states (as lists of ints), the config, the optimizer's skeleton (hyper-parameters and
  which tensor is which);
- ``trainer_state.safetensors``: the optimizer's tensors (AdamW moments and steps) and torch's RNG
  states;
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

import numpy as np
import torch

from spy_env.io import check_tree, honour_umask, lock_run, parse_json, pid_alive, write_text
from trainers.snapshots import optimizer_from_flat, optimizer_to_flat, restore_rng, rng_snapshot

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

STATE_FILE = "trainer_state.json"
TENSORS_FILE = "trainer_state.safetensors"
MANIFEST_FILE = "manifest.json"
FORMAT = 2  # 1: trainer_state.pt (pickle), no longer read
# What a checkpoint may hold outside accelerate/: never a pickle format (.bin, .pt, .pkl, ...)
DATA_SUFFIXES = frozenset({".safetensors", ".json", ".txt", ".model", ".jinja", ".md"})


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: missing, altered, corrupted or non-finite."""


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
    every writer of a run, fresh or resumed, takes it before it writes. Under a launcher rank 0 holds it
    for all ranks."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if _rank() == 0:
        weakref.finalize(owner, lock_run(folder).release)
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


# ------------------------------------------------------------------------ state as data
def _jsonable(value: Any) -> Any:
    """JSON-safe copy: tuples → lists, NumPy scalars → Python numbers (floats round-trip exactly)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return value


def write_state(folder: Path, state: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    (folder / STATE_FILE).write_text(json.dumps(_jsonable(state), indent=1), encoding="utf-8")
    save_file(dict(tensors), str(folder / TENSORS_FILE))


def read_state(folder: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The JSON state and the tensors of a verified checkpoint (no pickle anywhere)."""
    from safetensors.torch import load_file

    try:
        state = parse_json((folder / STATE_FILE).read_text(encoding="utf-8"), str(folder / STATE_FILE))
        tensors = load_file(str(folder / TENSORS_FILE))
    except FileNotFoundError as e:
        raise CheckpointError(f"{e.filename} is missing; refusing to resume from {folder}") from e
    except Exception as e:  # any parse failure of these files means a corrupt checkpoint
        raise CheckpointError(f"{folder / STATE_FILE} or {TENSORS_FILE} cannot be read ({e})") from e
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{folder / STATE_FILE} is not a spyrl checkpoint state (format {FORMAT})")
    return state, tensors


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
    """Write ``trainer``'s checkpoint to ``checkpoints/iter_K`` atomically; every process calls it."""
    root = trainer.output_dir / "checkpoints"
    target = root / f"iter_{trainer.iteration:05d}"
    main = trainer.accelerator.is_main_process
    # one staging folder for every process (they all write into it), renamed into place at the end
    tmp = root / f".tmp_iter_{trainer.iteration:05d}{'' if trainer.distributed else f'_{os.getpid()}'}"
    _refuse_non_finite(trainer)
    if main:
        remove_stale_staging(root)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    state_dict = None
    if trainer.distributed:
        trainer.accelerator.wait_for_everyone()
        # Collective. Model and optimizer as accelerate saves them for DDP, FSDP (shards) or
        # DeepSpeed (engine checkpoint), plus every process's RNG states; and the full weights
        # gathered once more for a plain Hugging Face folder.
        trainer.accelerator.save_state(str(tmp / "accelerate"))
        state_dict = trainer.accelerator.get_state_dict(trainer.model)
        trainer.accelerator.wait_for_everyone()
        if not main:  # the main process writes the rest; the others wait
            trainer.accelerator.wait_for_everyone()
            return target
    trainer.unwrapped.save_pretrained(tmp / "model", state_dict=state_dict)
    trainer.tokenizer.save_pretrained(tmp / "model")
    write_state(tmp, *_trainer_state(trainer))
    honour_umask(tmp)
    write_manifest(tmp)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    write_text(root / "latest", target.name)
    if trainer.distributed:
        trainer.accelerator.wait_for_everyone()
    return target


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
    if not trainer.distributed:
        trainer.optimizer.load_state_dict(optimizer_from_flat(state["optimizer"], tensors, trainer.optimizer))
        restore_rng(state["rng"], tensors)
    trainer.scheduler.load_state_dict(state["scheduler"])
    trainer.controller.load_state_dict(state["controller"])
    trainer.rae.load_state_dict(state["rae"])
    trainer.iteration = int(state["iteration"])
    trainer.sinks.truncate(int(state["metrics_rows"]))
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
