"""fp32 master weights for bf16 (or fp16) training: AdamW updates that do not round away.

At lr 1e-6 an AdamW step moves a weight by ~1e-6, far below half a bf16 ulp of a weight of 0.02
(~6e-5): AdamW run on bf16 parameters leaves almost every weight unchanged (1.9% of N(0, 0.02)
weights moved after 3 steps, issue #20). :class:`MasterAdamW` is AdamW with an fp32 master copy of
each low-precision parameter: gradients are upcast, the step (moments included) runs in fp32 on the
master, and the parameter becomes the master rounded to its dtype. The model keeps computing in
bf16; updates accumulate in fp32 until they cross a bf16 step, as in mixed-precision training.

It is the trainer's optimizer on every path. fp32 parameters (fp32 training, accelerate's FSDP with
mixed precision, which keeps fp32 shards, or DeepSpeed's fp32 partitions) are stepped as by plain
AdamW. Masters live in the optimizer state (``state[p]["master"]``), so checkpoints and
``accelerate.save_state`` keep them, and a resumed run continues from the same fp32 values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["MasterAdamW", "fp32_weights"]

LOW_PRECISION = (torch.bfloat16, torch.float16)


class MasterAdamW(torch.optim.AdamW):
    """AdamW on fp32 masters of the low-precision parameters (see the module docstring)."""

    def _low(self) -> list[torch.nn.Parameter]:
        return [p for g in self.param_groups for p in g["params"] if p.grad is not None and p.dtype in LOW_PRECISION]

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        swapped = []
        for p in self._low():  # the step sees the fp32 master and an fp32 gradient
            low, grad = p.data, p.grad
            master = self.state[p].get("master")
            if master is None:
                master = low.float()
            p.grad = None
            p.data = master
            p.grad = grad.float()
            swapped.append((p, low, grad))
        try:
            loss = super().step(closure)
        finally:
            for p, low, grad in swapped:
                master = p.data
                p.grad = None
                p.data = low
                p.grad = grad
                low.copy_(master)  # rounded to the parameter's dtype, in its own storage
                self.state[p]["master"] = master
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch casts state tensors to each parameter's dtype on load: keep masters and moments fp32."""
        saved = state_dict["state"]
        super().load_state_dict(state_dict)
        params = [p for g in self.param_groups for p in g["params"]]
        for pid, entry in saved.items():
            p = params[int(pid)]
            if p.dtype not in LOW_PRECISION:
                continue
            for key, value in entry.items():
                if key != "step" and isinstance(value, torch.Tensor) and value.is_floating_point():
                    self.state[p][key] = value.to(device=p.device, dtype=torch.float32)


def fp32_weights(optimizer: Any, params: Iterable[torch.nn.Parameter]) -> list[torch.Tensor]:
    """The fp32 values training holds for ``params``: the master where there is one, else the parameter."""
    optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps it
    out = []
    for p in params:
        master = optimizer.state.get(p, {}).get("master")
        out.append((master if master is not None else p).detach().float())
    return out
