"""fp32 master weights for bf16 (or fp16) training: AdamW updates that do not round away.

At lr 1e-6 an AdamW step moves a weight by ~1e-6, far below half a bf16 ulp of a weight of 0.02
(~6e-5): AdamW run on bf16 parameters leaves almost every weight unchanged (1.9% of N(0, 0.02)
weights moved after 3 steps). :class:`MasterAdamW` is AdamW with an fp32 master copy of
each low-precision parameter: gradients are upcast, the step (moments included) runs in fp32 on the
master, and the parameter becomes the master rounded to its dtype. The model keeps computing in
bf16; updates accumulate in fp32 until they cross a bf16 step, as in mixed-precision training.

It is the trainer's optimizer on one process and under DDP (:func:`make_optimizer`); an fp32
parameter is its own master, so fp32 training is exactly torch's AdamW. Under FSDP or DeepSpeed the
wrapper's own mixed precision keeps fp32 weights (accelerate upcasts FSDP's shards; DeepSpeed keeps
fp32 partitions) and plain AdamW is used. The masters are the inner AdamW's parameters; its
``state_dict`` carries them (``"master"`` of each low-precision entry), so checkpoints and
``accelerate.save_state`` keep them and a resumed run continues from the same fp32 values.
The model's parameters are never swapped (DDP's gradient hooks stay on them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["MasterAdamW", "fp32_weights", "make_optimizer"]

LOW_PRECISION = (torch.bfloat16, torch.float16)


class MasterAdamW(torch.optim.AdamW):
    """AdamW stepping fp32 masters of the low-precision parameters (see the module docstring)."""

    def __init__(self, params: Iterable[torch.nn.Parameter], **kwargs: Any) -> None:
        self.model_params = list(params)
        self.masters = [p.detach().float().clone() if p.dtype in LOW_PRECISION else p for p in self.model_params]
        self.master_of = {id(p): m for p, m in zip(self.model_params, self.masters, strict=True)}
        super().__init__(self.masters, **kwargs)

    def _pairs(self) -> list[tuple[torch.nn.Parameter, torch.Tensor]]:
        return [(p, m) for p, m in zip(self.model_params, self.masters, strict=True) if m is not p]

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        for p, master in self._pairs():  # upcast gradients onto the masters
            master.grad = None if p.grad is None else p.grad.float()
        loss = super().step(closure)
        for p, master in self._pairs():
            p.copy_(master)  # rounded to the parameter's dtype, in its own storage
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        for p, _ in self._pairs():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        state = {k: dict(v) for k, v in out["state"].items()}
        for index, (p, master) in enumerate(zip(self.model_params, self.masters, strict=True)):
            if master is not p:
                state.setdefault(index, {})["master"] = master
        return {**out, "state": state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state, masters = {}, {}
        for index, entry in state_dict["state"].items():
            entry = dict(entry)
            if "master" in entry:
                masters[int(index)] = entry.pop("master")
            if entry:
                state[index] = entry
        super().load_state_dict({**state_dict, "state": state})
        with torch.no_grad():  # a state without masters (fp32 run, older checkpoint): the loaded weights
            for index, (p, master) in enumerate(zip(self.model_params, self.masters, strict=True)):
                if master is not p:
                    master.copy_(masters[index] if index in masters else p.float())


def make_optimizer(params: Iterable[torch.nn.Parameter], accelerator: Any, **kwargs: Any) -> torch.optim.Optimizer:
    """:class:`MasterAdamW` on one process and under DDP; torch's AdamW under FSDP or DeepSpeed (their own
    mixed precision keeps fp32 weights, and accelerate remaps the optimizer onto their parameters)."""
    if str(getattr(accelerator, "distributed_type", "")).endswith(("FSDP", "DEEPSPEED")):
        return torch.optim.AdamW(params, **kwargs)
    return MasterAdamW(params, **kwargs)


def fp32_weights(optimizer: Any, params: Iterable[torch.nn.Parameter]) -> list[torch.Tensor]:
    """The fp32 values training holds for ``params``: the master where there is one, else the parameter."""
    optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps it
    masters = getattr(optimizer, "master_of", {})
    return [masters.get(id(p), p).detach().float() for p in params]
