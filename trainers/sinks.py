"""Where per-iteration metrics go: JSONL always (``metrics.jsonl``), plus console, wandb,
trackio and tensorboard on request. Optional backends are imported only when asked for.

``metrics.jsonl`` is a run's output, fresh or resumed: it is refused when it is a symbolic link (even a
dangling one), not a regular file, or hard-linked elsewhere, and appended to only through a descriptor
opened without following a link (:func:`spy_env.io.open_append`), so no row lands outside the run
folder. A write that fails (a full disk) is an ``OSError`` naming the file."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spy_env.io import check_output_file, open_append, parse_json, write_text, writing

__all__ = ["MetricSinks", "read_metrics"]


def _clean(metrics: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in metrics.items():
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        out[key] = value
    return out


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` (a run directory or the file itself)."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = parse_json(line, f"{path}: line {number}")
            if not isinstance(row, dict):
                raise ValueError(f"{path}: line {number} is not a metrics object")
            rows.append(row)
    return rows


class MetricSinks:
    def __init__(self, output_dir: Path, report_to: Sequence[str], config: Mapping[str, Any]) -> None:
        self.path = Path(output_dir) / "metrics.jsonl"
        self.report_to = list(report_to)
        if "jsonl" in self.report_to:
            check_output_file(self.path, "metrics file")  # a link would be read, then appended to
        self.rows_written = len(read_metrics(self.path)) if self.path.exists() else 0
        self._wandb = self._trackio = self._tensorboard = None
        self._console = None
        if "console" in self.report_to:
            from rich.console import Console

            self._console = Console()
        if "wandb" in self.report_to:
            try:
                import wandb
            except ImportError as e:
                raise ImportError("report_to wandb needs `pip install wandb`") from e
            self._wandb = wandb.init(project="spyrl", config=dict(config), dir=str(output_dir))
        if "trackio" in self.report_to:
            try:
                import trackio
            except ImportError as e:
                raise ImportError("report_to trackio needs `pip install trackio`") from e
            trackio.init(project="spyrl", config=dict(config))
            self._trackio = trackio
        if "tensorboard" in self.report_to:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise ImportError("report_to tensorboard needs `pip install tensorboard`") from e
            self._tensorboard = SummaryWriter(log_dir=str(Path(output_dir) / "tensorboard"))

    def log(self, metrics: Mapping[str, Any]) -> None:
        row = _clean(metrics)
        if "jsonl" in self.report_to:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open_append(self.path, "metrics file") as f, writing(self.path):
                f.write((json.dumps(row) + "\n").encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
        self.rows_written += 1
        step = row.get("iteration", self.rows_written)
        numeric = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self._console is not None:
            keys = (
                "env/detection_accuracy",
                "env/na_rate",
                "env/spy_caught_rate",
                "losses/loss",
                "losses/kl",
            )
            parts = [f"{k.split('/')[-1]} {row[k]:.3f}" for k in keys if isinstance(row.get(k), (int, float))]
            self._console.print(f"iter {step} ({row.get('stage')}) " + " · ".join(parts), markup=False)
        if self._wandb is not None:
            self._wandb.log(numeric, step=step)
        if self._trackio is not None:
            self._trackio.log(numeric, step=step)
        if self._tensorboard is not None:
            for key, value in numeric.items():
                self._tensorboard.add_scalar(key, value, step)

    def truncate(self, rows: int) -> None:
        """Keep the first ``rows`` lines (a resumed run rewrites what came after its checkpoint)."""
        check_output_file(self.path, "metrics file")
        if not self.path.exists():
            self.rows_written = 0
            return
        kept = read_metrics(self.path)[:rows]
        write_text(self.path, "".join(json.dumps(row) + "\n" for row in kept))
        self.rows_written = len(kept)

    def close(self) -> None:
        if self._wandb is not None:
            self._wandb.finish()
        if self._trackio is not None:
            self._trackio.finish()
        if self._tensorboard is not None:
            self._tensorboard.close()
