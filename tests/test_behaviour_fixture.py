"""Refactors keep behaviour: fixed seeds give the buffers and metrics of a recorded run.

The fixture under ``tests/fixtures/behaviour/`` was recorded on main before the structural
refactor of issue #12 (``SPYRL_RECORD_BEHAVIOUR=1 python -m pytest tests/test_behaviour_fixture.py``).
Re-record it only for an intended behaviour change, and say so in the commit message. Training
scenarios run on one thread (a reduction split over two threads rounds differently).

Each scenario is serialised as canonical JSON lines (sorted keys, floats in hex, long texts by
their sha256, long lists by the sha256 of their canonical JSON), so a
reordered row, a renamed column, one token, one vote or one reward that differs fails the test.
Floats are compared to a relative 1e-4: CPUs with different vector units (AVX2, AVX-512, AMX) round
the same float32 matmul differently in the last bits (measured: at most 6e-6 relative between an
AMD EPYC and an Intel Xeon on these scenarios), while a change of behaviour moves them far more and
almost always changes a sampled token as well. Timing fields (``time/*``, tokens per second) and the
run id are left out: they differ between runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import spy_env  # noqa: E402
from agents import HeuristicAgent, RandomAgent  # noqa: E402
from spy_env.buffer import EpisodeBuffer  # noqa: E402
from spy_env.runner import rollout  # noqa: E402
from trainers import SpyRLConfig, SpyRLTrainer  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "behaviour"
RECORD = os.environ.get("SPYRL_RECORD_BEHAVIOUR") == "1"
TIMING = ("time/", "perf/rollout_tokens_per_s", "perf/update_tokens_per_s")
VOLATILE = {"run_id"}


def canonical(value: Any) -> Any:
    """Plain JSON values; floats as their exact repr (NaN and infinities included)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in sorted(value.items()) if k not in VOLATILE}
    if isinstance(value, (list, tuple)):
        items = [canonical(v) for v in value]
        if len(items) > 24:  # token ids and log-probs by digest
            return f"{len(items)} items sha256:{hashlib.sha256(json.dumps(items).encode()).hexdigest()[:24]}"
        return items
    if isinstance(value, float):
        return repr(value) if not math.isfinite(value) else float.hex(value)
    if isinstance(value, str) and len(value) > 160:  # long texts by digest: the file stays small, the check exact
        return f"{value[:60]}…sha256:{hashlib.sha256(value.encode()).hexdigest()[:24]}"
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    raise TypeError(f"unexpected value in a row: {type(value).__name__}")


def lines(rows: list[dict]) -> str:
    return "".join(json.dumps(canonical(r), sort_keys=True, ensure_ascii=True) + "\n" for r in rows)


FLOAT_RTOL = 1e-4
HEX_FLOAT = re.compile(r"-?0x[0-9a-f]\.[0-9a-f]+p[+-]\d+")


def same(got: Any, want: Any) -> bool:
    """Equal values, hex floats within ``FLOAT_RTOL`` of each other; everything else exact."""
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(same(got[k], want[k]) for k in got)
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(same(a, b) for a, b in zip(got, want, strict=True))
    if isinstance(got, str) and isinstance(want, str) and HEX_FLOAT.fullmatch(got) and HEX_FLOAT.fullmatch(want):
        return math.isclose(float.fromhex(got), float.fromhex(want), rel_tol=FLOAT_RTOL, abs_tol=1e-12)
    return got == want


def check(name: str, text: str) -> None:
    path = FIXTURES / f"{name}.jsonl"
    if RECORD:
        FIXTURES.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    expected = path.read_text()
    got, want = text.splitlines(), expected.splitlines()
    if len(got) != len(want) or not all(same(json.loads(a), json.loads(b)) for a, b in zip(got, want, strict=True)):
        first = next(
            (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if not same(json.loads(a), json.loads(b))),
            min(len(got), len(want)),
        )
        raise AssertionError(
            f"{name}: behaviour changed at line {first + 1} ({len(got)} lines, fixture has {len(want)})\n"
            f"got:  {got[first][:400] if first < len(got) else '<end>'}\n"
            f"want: {want[first][:400] if first < len(want) else '<end>'}"
        )


def test_scripted_rollouts_match_the_fixture():
    config = spy_env.GameConfig(n_players=5, rounds=2)
    policies = [HeuristicAgent(), RandomAgent(seed=3), HeuristicAgent(), RandomAgent(seed=4), HeuristicAgent()]
    buffer = rollout(config, policies, 8, seed=7, games_per_document=2, replay_setup=True)
    check("scripted_rollout", lines(list(buffer)))


@pytest.fixture
def one_thread():
    """Bit-exact float results depend on how a reduction is split over threads: record and check on one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _train(tmp_path: Path, name: str, **values: Any) -> list[dict]:
    values = {"documents_per_iteration": 2, "games_per_document": 3, **values}
    config = SpyRLConfig.preset("cpu-smoke", output_dir=str(tmp_path / name), progress=False, **values)
    trainer = SpyRLTrainer(config)
    metrics = trainer.train()
    rows = [{k: v for k, v in m.items() if not k.startswith(TIMING)} for m in metrics]
    buffers = sorted((tmp_path / name / "buffers").glob("iter_*.parquet"))
    assert len(buffers) == config.run.iterations
    return rows + [row for path in buffers for row in EpisodeBuffer.load(path)]


@pytest.mark.slow
def test_trainer_alternating_stages_match_the_fixture(tmp_path, one_thread):
    """The cpu-smoke preset: detection then performing, eval games, checkpoint, RAE, KL."""
    rows = _train(tmp_path, "smoke", iterations=3, k_min=1, eval_games=6, eval_every=3, checkpoint_every=3)
    check("train_alternate", lines(rows))


@pytest.mark.slow
def test_trainer_paper_regime_with_decoding_programs_matches_the_fixture(tmp_path, one_thread):
    """The paper's loss regime with think-then-vote, abstention and forced boxed answers."""
    rows = _train(
        tmp_path, "paper", iterations=2, k_min=1, stage_schedule="alternate", vote_mode="think-then-vote",
        think_tokens=6, abstain=True, answer="boxed", answer_tokens=4, loss_type="dapo",
        kl_estimator="low_var_kl", rae_init="first_batch", penalty_advantage="own", mini_batch_unit="documents",
        mini_batch_size=4, stage_ema=0.5, spy_vote_in_group=True,
        game={"n_players": 4, "max_document_chars": 800, "allow_self_vote": True, "mask_placeholder": "",
              "train_spy_vote": True},
    )  # fmt: skip
    check("train_paper", lines(rows))


def test_the_comparison_forgives_last_bit_rounding_and_nothing_else():
    """A CPU's rounding passes; a changed float, token, key or length fails."""
    want = {"logprobs": [float.hex(-6.6492), float.hex(0.25)], "token_ids": [5, 7], "reward": float.hex(1.0)}
    assert same({**want, "logprobs": [float.hex(-6.6492 * (1 + 6e-6)), float.hex(0.25)]}, want)
    assert not same({**want, "logprobs": [float.hex(-6.6492 * (1 + 1e-3)), float.hex(0.25)]}, want)
    assert not same({**want, "token_ids": [5, 8]}, want)
    assert not same({**want, "reward": float.hex(-1.0)}, want)
    assert not same({**want, "logprobs": want["logprobs"][:1]}, want)
    assert not same({k: v for k, v in want.items() if k != "reward"}, want)
