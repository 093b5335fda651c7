"""Small helpers shared by tests: scripted games through the parallel API, a scripted OpenAI-compatible server,
a model-free stand-in for the trainer's sample selection."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import spy_env

EXPERIMENTS = Path(__file__).resolve().parents[1] / "lab" / "experiments"


def experiment_module(name: str) -> ModuleType:
    """``lab/experiments/NAME.py`` loaded as a module, with its folder on the import path while it loads (as
    Python gives a script run from the command line: its neighbours, ``harness`` first, import plainly).
    Registered under ``name`` (its dataclasses look their module up)."""
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EXPERIMENTS))
    return module


def kept_tiny_run(folder: Path, **settings: Any) -> tuple[Path, Path, Path]:
    """One detection iteration of a real run kept on disk (``run.keep_buffers``): a tiny model votes
    (constrained, one forward each) on heuristic performers' texts in a 5-player game, 3 games. Returns the
    model folder, the run folder and the run's config YAML; ``settings`` override the config."""
    from agents.tiny import build_tiny_model
    from trainers import SpyRLConfig
    from trainers.grpo import SpyRLTrainer

    model = build_tiny_model(folder / "tiny", hidden_size=64, num_layers=2, num_heads=4)
    config = SpyRLConfig.from_dict(dict(
        name_or_path=str(model), output_dir=str(folder / "run"), device="cpu", dtype="float32",
        documents_per_iteration=3, games_per_document=1, iterations=1, max_completion_tokens=12,
        vote_mode="constrained", performer="heuristic", stage_schedule="detect", checkpoint_every=1000,
        keep_buffers=True, eval_games=0, report_to=["jsonl"], progress=False,
        game={"n_players": 5, "degrade": "mask_spans", "max_document_chars": 300}, **settings,
    ))  # fmt: skip
    SpyRLTrainer(config).train_iteration()
    (folder / "config.yaml").write_text(config.to_yaml())
    return model, folder / "run", folder / "config.yaml"


GOOD = "Problem: what is $2 + 3$?\nSolution: $2 + 3 = 5$, so the answer is $\\boxed{5}$."


def fake_trainer(config: Any, rae: Any = None) -> SimpleNamespace:
    """What ``SpyRLTrainer.select_samples`` reads from a trainer, without a model: its advantage pipeline
    on one process, built as the trainer builds it (``config``: a ``SpyRLConfig``; ``rae``: the RAE
    baselines, fresh ones at the config's α if None)."""
    from spy_env.stage import Stage
    from trainers.advantages import AdvantagePipeline
    from trainers.algorithm import RAEBaselines

    rae = RAEBaselines(alpha=config.advantages.rae_alpha) if rae is None else rae
    learner = frozenset(stage for stage in (Stage.PERFORM, Stage.VOTE) if config.rollout.learner_plays(stage))
    pipeline = AdvantagePipeline(config.advantages, config.game, rae, learner, config.rollout.max_prompt_tokens)
    return SimpleNamespace(config=config, rae=rae, advantages=pipeline)


def play_scripted(
    env: spy_env.parallel_env,
    rounds: Sequence[tuple[Sequence[str] | None, Sequence[str]]],
    *,
    spy_seat: int,
    seed: int = 0,
):
    """Play rounds of (performances by seat or None for GOOD, vote replies by seat).

    Entries for eliminated seats are skipped. Returns the list of (rewards, terminations, infos)
    after each detection stage.
    """
    env.reset(seed=seed, options={"spy_seat": spy_seat, "document_index": 0})
    results = []
    for performances, votes in rounds:
        live = list(env.agents)
        seats = [env.seat_of[a] for a in live]
        env.step({a: (GOOD if performances is None else performances[s]) for a, s in zip(live, seats, strict=True)})
        _, rewards, terms, _, infos = env.step({a: votes[s] for a, s in zip(live, seats, strict=True)})
        results.append((rewards, terms, infos))
    return results


def vote(k: int | str) -> str:
    return f"My reasoning. <vote>{k}</vote>"


class _Answers(BaseHTTPRequestHandler):
    """Answers every POST with ``server.answer(n)``: a JSON-able body, bytes sent as they are, or
    ``(status, body)``."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            n = self.server.calls
            self.server.calls += 1
        body = self.server.answer(n)
        status, body = body if isinstance(body, tuple) else (200, body)
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextmanager
def answer_server(answer: Callable[[int], object]) -> Iterator[str]:
    """A scripted OpenAI-compatible server on 127.0.0.1; yields its ``/v1`` base URL. ``answer(n)`` makes
    the reply to the n-th POST (see :class:`_Answers`)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    server.answer, server.calls, server.lock = answer, 0, threading.Lock()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
