"""Weights-first linear products for playing on a CPU in float32.

A decode step multiplies a few rows of activations ``x`` (one per game being decoded) by every weight
matrix of the model: ``y = x Wᵀ`` (``torch.nn.functional.linear``). MKL computes that product with the
few rows as its outer dimension, which it spreads badly over the cores and streams the weights slowly;
the same numbers computed weights first, ``y = (W xᵀ)ᵀ``, make the weight matrix the outer dimension
(measured on a 2-core AMD EPYC with AVX2, SmolLM2-135M, 5 rows: the decode step 1.4x faster, the output
head 2.3x; float32 logits within 5e-4 of each other, the same argmax). ``python benchmarks/roofline.py``
prints both forms side by side on any machine.

:func:`weights_first` turns each float32 ``torch.nn.Linear`` of a model into a :class:`WeightsFirstLinear`
(the same module and parameters, another ``forward``), which takes the weights-first form only where it
pays and nothing trains: under ``torch.inference_mode`` (how :class:`agents.hf.HFPolicy` generates), on a
CPU, for 2 to :data:`MAX_ROWS` rows (a decode step's; a prefill's thousands of rows run as fast or faster
the usual way, and the transposed result's copy costs more there). Elsewhere (training, log-probs under
``no_grad``, a GPU) it is ``torch.nn.Linear`` exactly.

Where: ``SPYRL_WEIGHTS_FIRST`` is ``auto`` (unset: on AMD CPUs, where it was measured faster; an Intel
CPU's MKL has small-matrix kernels of its own and keeps torch's form until one is timed), ``1`` (on any CPU)
or ``0`` (never). A machine's choice is fixed by its CPU, not by a timing, so a seeded game replays the same.
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["MAX_ROWS", "SWITCH_ENV", "WeightsFirstLinear", "applies", "cpu_vendor", "weights_first"]

SWITCH_ENV = "SPYRL_WEIGHTS_FIRST"
SETTINGS = ("auto", "1", "0")
MEASURED_VENDORS = ("AuthenticAMD",)  # where weights first was timed faster (benchmarks/roofline.py)
MAX_ROWS = 32  # measured on the EPYC: 1.2-1.3x at 5 to 32 rows, even at 64, slower at thousands


class WeightsFirstLinear(torch.nn.Linear):
    """``torch.nn.Linear`` whose inference on a CPU computes ``(W xᵀ)ᵀ`` (the module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.dim() and x.shape[-1] else 0
        if not 2 <= rows <= MAX_ROWS or not torch.is_inference_mode_enabled() or self.weight.device.type != "cpu":
            return super().forward(x)
        out = torch.mm(self.weight, x.reshape(rows, self.in_features).T).T
        if self.bias is not None:
            out = out + self.bias
        return out.contiguous().view(*x.shape[:-1], self.out_features)


def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The CPU's vendor id (``AuthenticAMD``, ``GenuineIntel``, ...), or None where it cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        return None
    return None


def applies(setting: str | None = None, vendor: str | None = None) -> bool:
    """Whether models are loaded weights first: ``setting`` (else ``SPYRL_WEIGHTS_FIRST``, else ``auto``) on the
    CPU of ``vendor`` (else this machine's). ``ValueError`` naming the variable for another setting.

    >>> applies("auto", "AuthenticAMD"), applies("auto", "GenuineIntel"), applies("1", "GenuineIntel"), applies("0")
    (True, False, True, False)
    """
    setting = os.environ.get(SWITCH_ENV, "auto") if setting is None else setting
    if setting not in SETTINGS:
        raise ValueError(f"{SWITCH_ENV} must be auto, 1 or 0, got {setting!r}")
    if setting != "auto":
        return setting == "1"
    return (vendor or cpu_vendor()) in MEASURED_VENDORS


def weights_first(model: Any, setting: str | None = None) -> Any:
    """``model`` with each of its float32 ``torch.nn.Linear`` layers a :class:`WeightsFirstLinear` (in place;
    parameters, state dict and tied weights unchanged) where :func:`applies` says so, else as loaded.

    >>> layer = weights_first(torch.nn.Sequential(torch.nn.Linear(4, 3)), setting="1").get_submodule("0")
    >>> type(layer).__name__, isinstance(layer, torch.nn.Linear)
    ('WeightsFirstLinear', True)
    >>> x = torch.randn(5, 4)
    >>> with torch.inference_mode():
    ...     bool(torch.allclose(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias), atol=1e-6))
    True
    """
    if not applies(setting):
        return model
    for module in model.modules():
        if type(module) is torch.nn.Linear and module.weight.dtype == torch.float32:
            module.__class__ = WeightsFirstLinear
    return model
