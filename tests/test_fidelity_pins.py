"""Tests that pin the paper's elements so a wrong method fails (issue #20's mutants; docs/FIDELITY.md names them).

Each test checks one element with values a plausible wrong form would not reproduce: β ≠ λ, the N/A
condition blocking a switch on its own, the last of several vote tags, the training runner's own seat
draw, the held-out split through ``split_documents``, the mini-batch denominator across micro-batches and
every hyper-parameter of the paper preset.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import spy_env  # noqa: E402
from spy_env.corpus import Document, is_heldout, load_embedded, split_documents  # noqa: E402
from spy_env.parsing import parse_vote  # noqa: E402
from spy_env.rewards import performing_rewards  # noqa: E402
from spy_env.runner import Runner  # noqa: E402
from trainers.algorithm import StageController  # noqa: E402
from trainers.config import SpyRLConfig  # noqa: E402

PAPER = "qwen3-4b-paper"
HELDOUT_COUNT, HELDOUT_FIRST = 40, [2, 6, 10, 12, 15]  # of doc-0 .. doc-199 at 0.2, recorded


def test_spy_seat_is_uniform_in_the_env_and_in_trainings_runner():
    """Both draws of u: the env's reset and the runner's replayed setups (what training plays)."""
    env = spy_env.parallel_env(n_players=5)
    seats = []
    for seed in range(500):
        env.reset(seed=seed)
        seats.append(env.game.spy_seat)
    runner = Runner(spy_env.GameConfig(n_players=5), games_per_document=4, replay_setup=True)
    setups = runner._setups(2000, seed=3)
    groups = {s["group"]: s["options"]["spy_seat"] for s in setups}
    assert all(s["options"]["spy_seat"] == groups[s["group"]] for s in setups)  # a group shares its spy
    for drawn, n in ((seats, 500), (list(groups.values()), 500)):
        counts = np.bincount(drawn, minlength=5)
        assert len(counts) == 5 and counts.min() > 0.14 * n and counts.max() < 0.26 * n, counts  # 0.2 each


def test_performing_rewards_with_beta_not_lambda():
    """r_u = −β(m_u − m̄_c), r_cj = (β/n_c)(m_u − m̄_c) − λ(m_cj − m̄_c), with β = 2 and λ = 0.5."""
    received = [3, 1, 0, 1, 0]  # the spy (seat 0) drew 3 votes; civilians 1, 0, 1, 0 (mean 0.5)
    rewards = performing_rewards(received, 0, [True] * 5, beta=2.0, lam=0.5)
    gap = 3 - 0.5
    assert rewards[0] == pytest.approx(-2.0 * gap)
    assert rewards[1:] == pytest.approx([2.0 / 4 * gap - 0.5 * (m - 0.5) for m in (1, 0, 1, 0)])
    assert sum(rewards) == pytest.approx(0.0)
    assert performing_rewards(received, 0, [True] * 5) == pytest.approx([-2.5, 0.125, 1.125, 0.125, 1.125])


def test_detection_to_performing_needs_accuracy_and_na_and_back_on_either():
    """Each threshold and K_min on its own: na above na_low blocks a switch that accuracy allows."""

    def run(pairs, k_min=1, **kw):
        c = StageController(ema=0.0, k_min=k_min, **kw)
        return [c.update(acc, na).schedule_name for acc, na in pairs]

    assert run([(0.95, 0.11)]) == ["detect"]  # na blocks
    assert run([(0.95, 0.10)]) == ["perform"]  # both at their thresholds or better
    assert run([(0.90, 0.0)]) == ["perform"] and run([(0.89, 0.0)]) == ["detect"]
    assert run([(0.95, 0.0)], acc_high=0.97) == ["detect"] and run([(0.95, 0.15)], na_low=0.2) == ["perform"]
    assert run([(0.95, 0.0), (0.95, 0.0)], k_min=2) == ["detect", "perform"]
    to_perform = [(0.95, 0.0)]
    assert run([*to_perform, (0.61, 0.49)]) == ["perform", "perform"]  # inside the band
    assert run([*to_perform, (0.60, 0.0)]) == ["perform", "detect"]  # 1 − acc ≥ err_high alone
    assert run([*to_perform, (0.95, 0.50)]) == ["perform", "detect"]  # na ≥ na_high alone
    assert run([*to_perform, (0.75, 0.0)], err_high=0.2) == ["perform", "detect"]
    assert run([*to_perform, (0.95, 0.3)], na_high=0.3) == ["perform", "detect"]
    smooth = StageController(ema=0.25, k_min=1)  # acc_ema = ρ·prev + (1 − ρ)·acc, the first value initialises it
    assert [smooth.update(acc, 0.0).schedule_name for acc in (0.5, 1.0, 1.0)] == ["detect", "detect", "perform"]
    assert smooth.acc_ema == pytest.approx(0.25 * (0.25 * 0.5 + 0.75) + 0.75)


@pytest.mark.parametrize(
    "reply,target,abstain,violation",
    [
        ("<vote>1</vote> no, on reflection <vote>3</vote>", 2, False, None),  # the last tag counts
        ("<vote>3</vote> then <vote>N/A</vote>", None, True, None),
        ("<think><vote>4</vote></think> I pick <vote>2</vote>", 1, False, None),  # hidden reasoning ignored
        ("<vote>Player 5</vote>", 4, False, None),  # 1-based, as in the prompts
        ("<vote>1</vote>", 0, False, None),
        ("<vote>6</vote>", None, True, "out_of_range_vote"),
        ("<vote>0</vote>", None, True, "out_of_range_vote"),
        ("<vote>two</vote>", None, True, "unparseable_vote"),
        ("I vote 2", None, True, "missing_vote"),
    ],
)
def test_votes_read_the_last_tag_one_based(reply, target, abstain, violation):
    parsed = parse_vote(reply, 5)
    assert (parsed.target, parsed.abstain, parsed.violation) == (target, abstain, violation)


def test_heldout_split_is_by_id_hash_and_is_what_training_plays():
    """split_documents: about the fraction held out, disjoint and complete, the same whatever the order,
    and the trainer's training_documents is that split."""
    from trainers.documents import training_documents

    docs = [Document(f"doc-{i}", f"text {i}") for i in range(2000)]
    train, heldout = split_documents(docs, 0.2)
    assert 0.17 < len(heldout) / len(docs) < 0.23
    assert {d.id for d in train}.isdisjoint(d.id for d in heldout) and len(train) + len(heldout) == len(docs)
    assert all(is_heldout(d.id, 0.2) for d in heldout) and not any(is_heldout(d.id, 0.2) for d in train)
    shuffled = docs[:]
    random.Random(0).shuffle(shuffled)
    assert {d.id for d in split_documents(shuffled, 0.2)[1]} == {d.id for d in heldout}
    assert {d.id for d in split_documents(docs[:1000], 0.2)[1]} == {d.id for d in heldout if int(d.id[4:]) < 1000}
    assert split_documents(docs, 0.0) == (docs, [])
    more = split_documents(docs, 0.5)[1]
    assert {d.id for d in heldout} < {d.id for d in more}  # a larger fraction holds out a superset
    embedded = load_embedded()
    game = spy_env.GameConfig(corpus="embedded")
    trained, evaluated = training_documents(game, 0.2, eval_games=1)
    expect_train, expect_heldout = split_documents(embedded, 0.2)
    assert [d.id for d in trained] == [d.id for d in expect_train]
    assert [d.id for d in evaluated] == [d.id for d in expect_heldout] and evaluated


def test_dapo_denominator_is_the_whole_mini_batch_across_micro_batches(tmp_path):
    """One mini-batch of 16 rows trained in 1 or in 4 micro-batches makes the same update (token-mean
    over the mini-batch), for vote (action) and performance (token) ratios."""
    from tests.distributed_check import fixed_samples
    from trainers import SpyRLTrainer
    from trainers.precision import fp32_weights

    for stage in ("detect", "perform"):
        results = []
        for micro in (16, 4):
            config = SpyRLConfig.preset(
                "cpu-smoke", output_dir=str(tmp_path / f"{stage}{micro}"), loss_type="dapo", beta=0.0,
                mini_batch_size=16, micro_batch_size=micro, learning_rate=1e-3, max_grad_norm=0.0,
                keep_buffers=False, progress=False, report_to=[],
            )  # fmt: skip
            trainer = SpyRLTrainer(config)
            before = [p.detach().clone() for p in trainer.unwrapped.parameters()]
            trainer.update(fixed_samples(), stage)
            after = fp32_weights(trainer.optimizer, trainer.unwrapped.parameters())
            results.append((before, after))
        (b1, a1), (_, a4) = results
        moved = max((a - b).abs().max().item() for a, b in zip(a1, b1, strict=True))
        gap = max((x - y).abs().max().item() for x, y in zip(a1, a4, strict=True))
        # AdamW's first step is lr * g / (|g| + eps): where |g| is near eps, rounding (batch shapes, threads)
        # moves it by ~1e-3 lr; a wrong denominator reweights whole micro-batches, far above 1e-2 lr.
        assert moved > 1e-4 and gap < 1e-2 * moved, (stage, moved, gap)


PAPER_VALUES = {
    "name_or_path": "Qwen/Qwen3-4B-Instruct-2507", "dtype": "bfloat16", "gradient_checkpointing": True, "lora_r": 0,
    "train_top_layers": 0, "generation": "vllm-colocate", "documents_per_iteration": 128, "games_per_document": 8,
    "replay_setup": True, "document_order": "epoch", "temperature": 1.0, "top_p": 1.0, "max_prompt_tokens": 12288,
    "max_completion_tokens": 4096, "vote_mode": "free", "answer": "free", "iterations": 100,
    "learning_rate": 1e-6, "weight_decay": 0.0, "warmup_iterations": 0, "max_grad_norm": 1.0,
    "mini_batch_size": 128, "mini_batch_unit": "documents", "updates_per_iteration": 0, "epochs": 1,
    "epsilon": 0.2, "epsilon_high": None, "beta": 0.001, "kl_estimator": "low_var_kl", "loss_type": "dapo",
    "perform_ratio_level": "token", "detect_ratio_level": "action", "detect_advantage_groups": "game",
    "vote_gradient": "sampled", "spy_vote_in_group": True, "penalty_advantage": "own", "advantage_eps": 1e-4,
    "rae": True, "rae_alpha": 0.9, "rae_init": "first_batch", "perform_group_norm": False, "perform_roles": "all",
    "stage_schedule": "adaptive", "start_stage": "detect", "acc_high": 0.9, "na_low": 0.1, "err_high": 0.4,
    "na_high": 0.5, "k_min": 5, "stage_ema": 0.5, "heldout_fraction": 0.2,
}  # fmt: skip
PAPER_GAME = {
    "n_players": 5, "rounds": 1, "allow_self_vote": True, "mask_placeholder": "", "corpus": "nemotron:4plus",
    "max_documents": 16000, "task": "math", "train_spy_vote": True,
}  # fmt: skip


def test_paper_preset_sets_every_hyper_parameter():
    """Every value of the paper's regime (the paper's, verl's, or a listed choice), model id and lengths included."""
    paper = SpyRLConfig.preset(PAPER)
    values = {k: v for section in paper.to_dict().values() for k, v in section.items()}
    assert {k: values[k] for k in PAPER_VALUES} == PAPER_VALUES
    game = paper.game
    assert {k: game.to_dict()[k] for k in PAPER_GAME} == PAPER_GAME
    assert game.rules.resolved_degrade == "mask_spans" and game.rules.resolved_ratio == pytest.approx(0.4)


@pytest.mark.parametrize(
    "reply,shown",
    [
        ("<think>secret</think> Answer", "Answer"),
        ("<think>a</think> x <think>b</think> Final", "Final"),  # after the last </think>
        ("mid-thought secret </think>Done", "Done"),  # templates that open <think> in the prompt
        ("Visible. <think>never closed secret", "Visible."),
        ("no reasoning at all", "no reasoning at all"),
    ],
)
def test_think_is_stripped_in_every_form(reply, shown):
    from spy_env.parsing import strip_think

    assert strip_think(reply) == shown


def test_group_normalisation_uses_population_std_and_eps():
    """Eq. 5 as implemented: (r − mean) / (population std + ε), ε = advantage_eps = 1e-4."""
    from trainers.algorithm import group_normalized_advantages

    adv = group_normalized_advantages([1.0, 0.0, 0.0, 0.0, 0.0], ["g"] * 5)
    std = np.std([1.0, 0, 0, 0, 0])  # 0.4, population
    assert adv == pytest.approx([(0.8) / (std + 1e-4), *[(-0.2) / (std + 1e-4)] * 4], rel=1e-12)
    assert group_normalized_advantages([1.0, 0.0], ["g"] * 2, eps=0.5).tolist() == pytest.approx([0.5, -0.5])
    assert SpyRLConfig.preset(PAPER).advantages.advantage_eps == 1e-4


def test_heldout_membership_is_pinned():
    """The split itself (salt and hash) is part of the method: a run and its evaluation hold out the same ids."""
    heldout = [i for i in range(200) if is_heldout(f"doc-{i}", 0.2)]
    assert len(heldout) == HELDOUT_COUNT and heldout[:5] == HELDOUT_FIRST


def test_detection_reward_is_one_exactly_for_a_vote_on_the_spy():
    """Eq. 4 over all n voters: r = 1[v = u]; an abstention, an invalid vote or another seat is 0."""
    from spy_env.rewards import detection_rewards

    assert detection_rewards([2, None, 0, 2, 2], 2) == [1.0, 0.0, 0.0, 1.0, 1.0]  # seat 2 (the spy) names itself
    assert detection_rewards([None] * 3, 0) == [0.0, 0.0, 0.0]


def test_nemotron_spec_streams_config_4plus_and_its_first_rows(monkeypatch):
    """`nemotron` means Nemotron-CC-Math-v1 config 4plus; the paper preset takes its first 16,000 usable rows."""
    import spy_env.corpus as corpus

    calls = []
    monkeypatch.setattr(corpus, "load_hub", lambda path, name, **kw: calls.append((path, name, kw["max_documents"])))
    corpus.load_corpus("nemotron", max_documents=16000)
    corpus.load_corpus("nemotron:3")
    assert calls == [(corpus.NEMOTRON_ID, "4plus", 16000), (corpus.NEMOTRON_ID, "3", 10_000)]
    stream = iter([{"id": f"d{i}", "text": f"document {i} " + "x" * 200} for i in range(50)])
    docs, _ = corpus.documents_from_rows(stream, max_documents=5)
    assert [d.id for d in docs] == ["d0", "d1", "d2", "d3", "d4"]  # the first rows, in stream order


def test_the_mutation_check_is_current(monkeypatch):
    """tools/mutants.py stays applicable as the code moves: every FIDELITY row has a mutant, every
    mutant names a row of the table, and each of its substitutions finds its text exactly once (a stale
    mutant would otherwise be reported as an error only when someone runs the 10-minute check)."""
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("mutants", root / "tools" / "mutants.py")
    mutants = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "mutants", mutants)  # its dataclasses look their module up
    spec.loader.exec_module(mutants)
    rows = mutants.named_tests()
    assert set(rows) == {x.row for x in mutants.MUTANTS}
    assert all(rows[row] for row in rows)  # every row names at least one test
    for mutant in mutants.MUTANTS:
        source = (root / mutant.path).read_text(encoding="utf-8")
        for old, new in mutant.edits:  # applied in order, as the script does
            assert old != new and source.count(old) == 1, (mutant.row, mutant.name, old)
            source = source.replace(old, new)
