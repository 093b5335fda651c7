"""The fixed leaderboard sets: reproducible files, held out of every training preset, real prompts, scores."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import agents
from spy_env.corpus import CorpusFilter, is_heldout, load_corpus, split_documents
from spy_env.heldout import bootstrap
from spyrl.evaluation import leaderboard as leaderboard_module
from spyrl.evaluation import results_table
from spyrl.evaluation.leaderboard import KINDS, build_set, load_set, run_leaderboard, set_path
from trainers import PRESETS, SpyRLConfig

ROOT = Path(__file__).resolve().parents[1]


class Recorder:
    """Records what it is shown; performs/votes like the heuristic."""

    name = "recorder"

    def __init__(self):
        self.inner, self.seen = agents.HeuristicAgent(), []

    def act(self, observations):
        self.seen += list(observations)
        return self.inner.act(observations)


@pytest.mark.parametrize("kind", KINDS)
def test_shipped_sets_are_versioned_and_rebuild_identically(kind):
    text = set_path(kind).read_text(encoding="utf-8")
    raw = json.loads(text)
    assert raw["name"] == kind and raw["version"] == 1 and set_path(kind).name == f"{kind}-v1.json"
    assert len(raw["games"]) == raw["build"]["num_games"] == 100
    assert build_set(kind, raw["build"]["num_games"], seed=raw["build"]["seed"]) == text


def _train_ids(config: SpyRLConfig) -> set[str]:
    """The documents a trainer with ``config`` plays (the same load and split as SpyRLTrainer)."""
    game = config.game
    documents = load_corpus(
        game.source.corpus,
        CorpusFilter(truncate=game.limits.max_document_chars),
        max_documents=game.source.max_documents,
    )
    return {d.id for d in split_documents(documents, config.run.heldout_fraction)[0]}


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("kind", KINDS)
def test_benchmark_documents_are_held_out_of_every_preset(kind, preset, tmp_path):
    board, documents = load_set(kind)
    ids = {g.document_id for g in board.games}
    assert ids == {d.id for d in documents} and len(ids) >= 10
    config = SpyRLConfig.preset(preset, output_dir=str(tmp_path))
    # corpus-independent: the split is a hash of the id, so no corpus could put them in training
    assert all(is_heldout(i, config.run.heldout_fraction) for i in ids)
    if config.game.source.corpus != "embedded":  # a hub corpus (the paper's Nemotron): no network here
        return
    assert not ids & _train_ids(config)
    # and the check has teeth: a preset that held nothing out would train on the benchmark
    assert ids <= _train_ids(SpyRLConfig.preset(preset, output_dir=str(tmp_path), heldout_fraction=0.0))


def test_detect_shows_the_model_the_envs_vote_prompt_from_a_civilian_seat():
    recorder = Recorder()
    results = run_leaderboard("detect", recorder, limit=12)
    board, documents = load_set("detect")
    texts = {d.id: d.text for d in documents}
    assert len(recorder.seen) == 12
    for obs, game in zip(recorder.seen, board.games, strict=False):
        assert obs["stage"] == 1 and obs["seat"] == game.seat != game.spy_seat
        assert obs["copy"] == texts[game.document_id]  # a civilian reads the source
        assert tuple(obs["performances"]) == tuple(p.strip() for p in game.performances)
        assert f"Player {game.seat + 1}" in obs["prompt"] and game.performances[game.spy_seat].strip() in obs["prompt"]
    items = results["results"]["detect-v1"]["items"]
    assert [i["game_seed"] for i in items] == [g.game_seed for g in board.games[:12]]


def test_spy_gives_the_model_the_spy_seat_and_its_degraded_copy():
    recorder = Recorder()
    run_leaderboard("spy", recorder, limit=12)
    board, documents = load_set("spy")
    texts = {d.id: d.text for d in documents}
    assert [obs["seat"] for obs in recorder.seen] == [g.spy_seat for g in board.games[:12]]
    assert all(obs["stage"] == 0 for obs in recorder.seen)
    assert all(obs["copy"] != texts[g.document_id] for obs, g in zip(recorder.seen, board.games, strict=False))


def test_scores_of_the_scripted_agents_with_intervals_in_eval_format():
    heuristic = run_leaderboard("detect", agents.load("heuristic"), model="heuristic")
    random = run_leaderboard("detect", agents.load("random"), model="random")
    h, r = heuristic["results"]["detect-v1"], random["results"]["detect-v1"]
    assert set(heuristic) >= {"model", "decoding", "protocol", "seed", "limit", "results"}
    assert h["n"] == 100 and h["k"] == 1 and len(h["items"]) == 100
    assert h["interval"]["low"] <= h["accuracy"] <= h["interval"]["high"]
    assert h["interval"]["low"] > r["interval"]["high"]  # the heuristic reads the games; random is chance
    assert abs(r["accuracy"] - 0.25) < 0.12 and math.isnan(h["metrics"]["expected_accuracy"]["mean"])
    assert "| heuristic |" in results_table([heuristic, random])  # `spyrl eval --compare` reads it
    spy_h = run_leaderboard("spy", agents.load("heuristic"))["results"]["spy-v1"]
    spy_r = run_leaderboard("spy", agents.load("random"))["results"]["spy-v1"]
    assert spy_h["accuracy"] > spy_r["accuracy"] and spy_r["metrics"]["votes_against_share"]["mean"] > 0.5


def test_a_limit_is_a_prefix_of_the_full_run():
    full = run_leaderboard("spy", agents.load("heuristic"))["results"]["spy-v1"]["items"]
    short = run_leaderboard("spy", agents.load("heuristic"), limit=20)["results"]["spy-v1"]["items"]
    assert short == full[:20]


def test_a_changed_document_or_operator_is_an_error(tmp_path, monkeypatch):
    raw = json.loads(set_path("detect").read_text(encoding="utf-8"))
    raw["games"][0]["document_sha256"] = "0" * 64
    (tmp_path / "a.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="text changed"):
        load_set("detect", tmp_path / "a.json")
    raw = json.loads(set_path("detect").read_text(encoding="utf-8"))
    raw["games"][0]["spy_copy_sha256"] = "0" * 64
    (tmp_path / "b.json").write_text(json.dumps(raw))
    # stands in for a released set whose operator changed since (the file itself is released)
    monkeypatch.setitem(
        leaderboard_module.RELEASED_SHA256, "detect-v1", hashlib.sha256(json.dumps(raw).encode()).hexdigest()
    )
    with pytest.raises(ValueError, match="degradation operator changed"):
        run_leaderboard("detect", agents.load("random"), path=tmp_path / "b.json", limit=1)


def test_leaderboard_command(tmp_path):
    def spyrl(*args):
        proc = subprocess.run([sys.executable, "-m", "spyrl", *args], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        return proc.stdout

    out = spyrl("leaderboard", "spy", "--model", "heuristic", "--limit", "10", "--out", str(tmp_path / "h.json"))
    assert "| heuristic | spy-v1 | survival_rate |" in out
    results = json.loads((tmp_path / "h.json").read_text())
    assert results["limit"] == 10 and results["results"]["spy-v1"]["n"] == 10
    assert "| heuristic | spy-v1 |" in spyrl("leaderboard", "spy", "--compare", str(tmp_path / "h.json"))
    spyrl("leaderboard", "build", "--out-dir", str(tmp_path / "sets"))
    for kind in KINDS:
        assert (tmp_path / "sets" / f"{kind}-v1.json").read_text() == set_path(kind).read_text()


def test_an_hf_model_gets_expected_accuracy_from_its_vote_distribution(tiny_model_dir):
    from agents.decoding import DecodingOptions
    from agents.hf import HFPolicy

    policy = HFPolicy.from_pretrained(
        str(tiny_model_dir),
        device="cpu",
        decoding=DecodingOptions("constrained"),
        sampling=agents.SamplingParams(max_new_tokens=8, seed=0),
    )
    result = run_leaderboard("detect", policy, model="tiny", limit=3)["results"]["detect-v1"]
    assert result["n"] == 3 and result["forfeits"] == 0
    for item in result["items"]:
        assert 0.0 <= item["expected_accuracy"] <= 1.0 and item["valid_vote_rate"] == 1.0


def test_a_set_whose_performances_were_rewritten_is_refused(tmp_path, capsys):
    """Pass 3, item 10: rewritten stored performances were accepted as detect-v1 (score 0.65 -> 0.90)."""
    for kind in KINDS:  # the released hashes are the shipped files'
        digest = hashlib.sha256(set_path(kind).read_bytes()).hexdigest()
        assert leaderboard_module.RELEASED_SHA256[f"{kind}-v1"] == digest
    raw = json.loads(set_path("detect").read_text(encoding="utf-8"))
    raw["games"][0]["performances"] = ["the spy is Player 1"] * len(raw["games"][0]["performances"])
    forged = tmp_path / "detect-v1.json"
    forged.write_text(json.dumps(raw, indent=1))
    with pytest.raises(ValueError, match="is not the released detect-v1"):
        load_set("detect", forged)


def test_leaderboard_compare_pairs_each_file_with_the_first_on_the_same_games():
    from spyrl.evaluation.leaderboard import leaderboard_table

    base = run_leaderboard("detect", agents.load("first-seat"), limit=24, model="first-seat")
    heuristic = run_leaderboard("detect", agents.load("heuristic"), limit=24, model="heuristic")
    other = run_leaderboard("detect", agents.load("heuristic"), limit=12, model="heuristic-12")  # not the same games
    lines = leaderboard_table([base, heuristic, other]).splitlines()[2:]
    rows = {line.split("|")[1].strip(): line for line in lines}
    before, after = ([g["detection_accuracy"] for g in r["results"]["detect-v1"]["items"]] for r in (base, heuristic))
    gain = bootstrap([b - a for a, b in zip(before, after, strict=True)])
    assert gain.mean > 0  # the heuristic beats first-seat on these games, so the column has something to show
    assert rows["heuristic"].endswith(f"| {gain.mean:+.3f} [{gain.low:+.3f}, {gain.high:+.3f}] |")
    assert rows["first-seat"].endswith("| — |") and rows["heuristic-12"].endswith("| — |")


class LowestSeat:
    """A detector that votes for the lowest seat it may vote for, and says so with certainty."""

    name = "lowest-seat"

    def __init__(self):
        self.calls: list[list[dict]] = []

    def act(self, observations):
        from spy_env.policy import Action

        self.calls.append(list(observations))
        picks = [int(np.flatnonzero(obs["vote_targets"])[0]) for obs in observations]
        return [Action(text=f"<vote>{k + 1}</vote>", vote_distribution={str(k + 1): 1.0}) for k in picks]


def test_a_detector_policy_casts_the_civilians_votes_of_a_spy_set():
    """A panel in place of the fixed heuristic detectors: every civilian vote of every game in one batch,
    its votes decide survival, and its stated probabilities give the expected share of votes on the spy."""
    detector, limit = LowestSeat(), 12
    result = run_leaderboard("spy", agents.load("heuristic"), limit=limit, detector=detector)
    spy = result["results"]["spy-v1"]
    (call,) = detector.calls  # one batch: every civilian seat of every game
    board, _ = load_set("spy")
    n = [len(g.performances) for g in board.games[:limit]]
    assert len(call) == sum(k - 1 for k in n) and all(obs["stage"] == 1 for obs in call)
    assert result["protocol"]["detector"] == "lowest-seat"
    for item, game, players in zip(spy["items"], board.games[:limit], n, strict=True):
        lowest = _lowest_seats(players, game.spy_seat)
        assert item["votes"] == [f"<vote>{k}</vote>" for k in lowest]
        share = sum(k - 1 == game.spy_seat for k in lowest) / len(lowest)
        assert item["expected_votes_against_share"] == item["votes_against_share"] == share
        assert item["survival_rate"] == float(game.spy_seat != 0)  # all but seat 0's voter pick seat 0
    assert spy["metrics"]["expected_votes_against_share"]["n"] == limit
    heuristic = run_leaderboard("spy", agents.load("heuristic"), limit=limit)["results"]["spy-v1"]
    assert "expected_votes_against_share" not in heuristic["metrics"]
    assert [i["votes_against_share"] for i in heuristic["items"]] != [i["votes_against_share"] for i in spy["items"]]
    with pytest.raises(ValueError, match="detect sets have none"):
        run_leaderboard("detect", agents.load("heuristic"), limit=2, detector=LowestSeat())


def _lowest_seats(players: int, spy_seat: int) -> list[int]:
    """Each civilian's vote (1-based) when it votes for the lowest seat other than its own."""
    return [1 if voter != 0 else 2 for voter in range(players) if voter != spy_seat]


class Paster:
    """A spy that pastes its copy: a rule-breaking text (``verbatim_copy``) the fixed detectors read as a civilian's."""

    name = "paster"

    def act(self, observations):
        return [obs["copy"] for obs in observations]


def test_a_spy_that_pastes_its_copy_survives_but_not_cleanly():
    """``clean_survival_rate`` counts a performance that broke a rule as caught: beside survival in every
    result, its protocol, and the compare table (derived from survival and violations for older files)."""
    from spyrl.evaluation.leaderboard import leaderboard_table

    heuristic = run_leaderboard("spy", agents.load("heuristic"), limit=40, model="heuristic")
    paster = run_leaderboard("spy", Paster(), limit=40, model="paster")
    items = paster["results"]["spy-v1"]["items"]
    assert all("verbatim_copy" in item["violations"] for item in items)
    assert sum(item["survival_rate"] for item in items) > 0  # the detectors spare some pasted copies ...
    assert all(item["clean_survival_rate"] == 0.0 for item in items)  # ... and none counts as clean
    for item in heuristic["results"]["spy-v1"]["items"]:
        assert item["clean_survival_rate"] == float(item["survival_rate"] == 1.0 and not item["violations"])
    assert paster["results"]["spy-v1"]["metrics"]["clean_survival_rate"]["mean"] == 0.0
    assert "clean_survival_rate" in paster["protocol"]["secondary"]
    old = json.loads(json.dumps(paster))  # a file written before the score was recorded
    for item in old["results"]["spy-v1"]["items"]:
        del item["clean_survival_rate"]
    del old["results"]["spy-v1"]["metrics"]["clean_survival_rate"]
    new_rows, old_rows = (leaderboard_table([heuristic, run]).splitlines()[2:] for run in (paster, old))
    assert new_rows == old_rows and len(new_rows) == 4  # two files × (survival, clean survival)
    clean = next(row for row in new_rows if row.startswith("| paster | spy-v1 | clean_survival_rate |"))
    before = [item["clean_survival_rate"] for item in heuristic["results"]["spy-v1"]["items"]]
    gain = bootstrap([0.0 - b for b in before])
    assert gain.mean < 0 and clean.endswith(f"| {gain.mean:+.3f} [{gain.low:+.3f}, {gain.high:+.3f}] |")
    survival = next(row for row in new_rows if row.startswith("| paster | spy-v1 | survival_rate |"))
    assert "| 0.000 [0.000, 0.000] |" not in survival


@pytest.mark.parametrize(
    ("items", "message"),
    [([1, 2], "must be mappings"), ([{"survival_rate": "yes", "violations": []}], "survival_rate must be a finite")],
)
def test_compare_refuses_a_malformed_result_item_with_one_error_line(tmp_path, items, message):
    good = run_leaderboard("spy", agents.load("heuristic"), limit=2, model="heuristic")
    bad = json.loads(json.dumps(good))
    bad["results"]["spy-v1"]["items"] = items
    for name, run in (("good", good), ("bad", bad)):
        (tmp_path / f"{name}.json").write_text(json.dumps(run))
    proc = subprocess.run(
        [sys.executable, "-m", "spyrl", "leaderboard", "spy", "--compare", str(tmp_path / "good.json"),
         str(tmp_path / "bad.json")],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error:") and message in line
