"""A trainer's optimizer and RNG states as data: a JSON skeleton plus named tensors (for
safetensors), never a pickle. :mod:`trainers.checkpoint` writes and reads them."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["optimizer_from_flat", "optimizer_to_flat", "restore_rng", "rng_snapshot"]


def _tensor(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu").contiguous().clone()


def optimizer_to_flat(state_dict: Mapping[str, Any], prefix: str = "optimizer") -> tuple[dict, dict]:
    """A torch optimizer ``state_dict`` as (JSON skeleton, named tensors)."""
    tensors: dict[str, torch.Tensor] = {}
    skeleton_state: dict[str, dict[str, Any]] = {}
    for pid, entry in state_dict["state"].items():
        out = {}
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                name = f"{prefix}.state.{pid}.{key}"
                tensors[name] = _tensor(value)
                out[key] = {"tensor": name}
            else:
                out[key] = {"value": value}
        skeleton_state[str(pid)] = out
    return {"state": skeleton_state, "param_groups": list(state_dict["param_groups"])}, tensors


def optimizer_from_flat(skeleton: Mapping[str, Any], tensors: Mapping[str, torch.Tensor], current: Any) -> dict:
    """Rebuild a ``state_dict`` for ``current`` (an optimizer) from :func:`optimizer_to_flat`'s output."""
    state = {}
    for pid, entry in skeleton["state"].items():
        state[int(pid)] = {
            key: tensors[value["tensor"]] if "tensor" in value else value["value"] for key, value in entry.items()
        }
    groups = []
    for saved, now in zip(skeleton["param_groups"], current.state_dict()["param_groups"], strict=True):
        # JSON has no tuples: give back tuples where the optimizer has them (AdamW's betas)
        groups.append({k: tuple(v) if isinstance(now.get(k), tuple) else v for k, v in saved.items()})
    return {"state": state, "param_groups": groups}


def rng_snapshot() -> tuple[dict, dict]:
    """Python, NumPy and torch (CPU, CUDA) RNG states as (JSON, named tensors)."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    json_part = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
    }
    tensors = {"rng.torch": _tensor(torch.get_rng_state())}
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = _tensor(state)
    return json_part, tensors


def restore_rng(json_part: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> None:
    version, internal, gauss = json_part["python"]
    random.setstate((int(version), tuple(int(x) for x in internal), gauss))
    kind, keys, pos, has_gauss, cached = json_part["numpy"]
    np.random.set_state((str(kind), np.asarray(keys, dtype=np.uint32), int(pos), int(has_gauss), float(cached)))
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [tensors[k] for k in sorted((k for k in tensors if k.startswith("rng.cuda.")), key=lambda k: int(k[9:]))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
