"""Rule baselines (agents/rules.py), the length-matched performer and the table of lab/experiments/rule_baselines.py."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

import agents
from agents.rules import RULES, SINGLE_TEXT_RULES, RuleAgent, overlap, played_shares
from agents.scripted import (
    MATCHED_CHARS,
    DisjointHeuristicAgent,
    HeuristicAgent,
    MatchedHeuristicAgent,
    SoftHeuristicAgent,
    numbers_in,
)
from spy_env.config import GameConfig
from spy_env.heldout import bootstrap
from spy_env.runner import Runner
from spy_env.stage import Stage

ROOT = Path(__file__).resolve().parents[1]
EASED = {"n_players": 3, "degrade": "blank", "max_document_chars": 600}


def vote_obs(performances, seat=0, legal=None):
    n = len(performances)
    targets = np.zeros(n, dtype=np.int8)
    targets[[s for s in range(n) if s != seat] if legal is None else legal] = 1
    return {
        "stage": Stage.VOTE.index,
        "seat": seat,
        "copy": "x",
        "performances": tuple(performances),
        "vote_targets": targets,
    }


def voted(reply: str) -> int:
    return int(re.search(r"<vote>(\d+)</vote>", reply).group(1)) - 1


def test_each_rule_votes_for_its_extreme_among_the_legal_seats():
    performances = ["mine, the shortest of all", "a b 1 2 3 4 5 6 7 8 9 10 11", "seven 7", "x" * 40]
    picks = {rule: voted(RuleAgent(rule).act([vote_obs(performances)])[0]) for rule in SINGLE_TEXT_RULES}
    # the voter's own seat 0 holds the shortest text and is not legal
    assert picks == {"shortest": 2, "longest": 3, "fewest-numbers": 3, "first-seat": 1}
    assert voted(RuleAgent("first-seat").act([vote_obs(performances, legal=[2, 3])])[0]) == 2
    assert set(RULES) == {*SINGLE_TEXT_RULES, "odd-one-out"}


def test_odd_one_out_votes_for_the_text_unlike_the_others_counting_the_voters_own():
    same = "Using its quantities 6, 36, 1, compute their sum. 6 + 36 + 1 = 43."
    spy = "Using its quantities 36, 7, 6, compute their sum. 36 + 7 + 6 = 49."
    for spy_seat in (1, 2, 3, 4):
        performances = [spy if s == spy_seat else same for s in range(5)]
        assert voted(RuleAgent("odd-one-out").act([vote_obs(performances)])[0]) == spy_seat
    # three players: only the voter's own text tells which of the two others is the odd one
    assert voted(RuleAgent("odd-one-out").act([vote_obs([same, spy, same])])[0]) == 1
    assert voted(RuleAgent("odd-one-out").act([vote_obs([same, same, spy])])[0]) == 2
    # an eliminated seat ("") is not a text to compare with
    assert voted(RuleAgent("odd-one-out").act([vote_obs([same, "", spy, same], legal=[2, 3])])[0]) == 2
    assert overlap("", "") == 1.0 and overlap("a b", "c") == 0.0


def test_rule_ties_are_broken_at_random_and_never_abstain():
    tied = vote_obs(["me", "same", "same", "same"])
    picks = {voted(RuleAgent("shortest", seed=s).act([tied])[0]) for s in range(40)}
    assert picks == {1, 2, 3}
    assert RuleAgent("shortest").act([vote_obs(["me", "a"], legal=[])])[0].endswith("<vote>N/A</vote>")


def test_rule_agents_perform_as_the_heuristic_and_load_by_spec():
    config = GameConfig.from_dict({"n_players": 4, "degrade": "mask_spans"})
    rows = {}
    for spec in ("heuristic", *RULES):
        buffer = Runner(config, run_id=spec).run([agents.load(spec, seed=3)] * 4, 3, seed=5)
        rows[spec] = [r["completion"] for r in buffer if r["stage"] == Stage.PERFORM]
    assert all(texts == rows["heuristic"] for texts in rows.values())
    assert agents.load("fewest-numbers:7").name == "fewest-numbers"
    with pytest.raises(ValueError, match="integer seed"):
        agents.load("shortest:x")
    with pytest.raises(ValueError, match="rule must be one of"):
        RuleAgent("loudest")


def _eased_games(voter: str, performer: str, games: int):
    """Per game: the civilian votes' detection accuracy, and the legal performances each civilian saw."""
    from trainers.policies import StagePolicy

    config = GameConfig.from_dict(EASED)
    seat = StagePolicy(agents.load(voter, seed=1), performer=agents.load(performer, seed=1))
    buffer = Runner(config, run_id=voter).run([seat] * 3, games, seed=11)
    texts = {(r["game_id"], r["seat"]): r["completion"] for r in buffer if r["stage"] == Stage.PERFORM}
    accuracy: dict[int, list[float]] = {}
    seen = []
    for r in buffer:
        if r["stage"] == Stage.VOTE and r["role"] == "civilian":
            accuracy.setdefault(r["game_id"], []).append(float(r["vote"] == r["spy_seat"]))
            seen.append([texts[r["game_id"], s] for s in range(3) if s != r["seat"]])
    return [float(np.mean(v)) for v in accuracy.values()], seen


def test_length_solves_the_eased_game_and_not_the_matched_one():
    accuracy, _ = _eased_games("shortest", "heuristic", 60)
    assert bootstrap(accuracy).mean == 1.0
    # matched: every rule that reads the performances ties on every vote, so it votes at random
    _, seen = _eased_games("shortest", "heuristic-matched", 60)
    for rule in ("shortest", "longest", "fewest-numbers"):
        assert all(len({RULES[rule].score(0, text, legal) for text in legal}) == 1 for legal in seen), rule
    # first-seat never reads them: the same votes whoever performs
    assert _eased_games("first-seat", "heuristic", 60)[0] == _eased_games("first-seat", "heuristic-matched", 60)[0]
    # what still separates the spy is content compared with one's own copy
    assert bootstrap(_eased_games("heuristic", "heuristic-matched", 60)[0]).mean > 0.9


def test_matched_performances_have_one_length_and_one_number_count():
    for settings in (EASED, {"n_players": 5, "degrade": "mask_spans"}, {"n_players": 4, "degrade": "perturb_numbers"}):
        config = GameConfig.from_dict(settings)
        buffer = Runner(config, run_id="m").run([agents.load("heuristic-matched")] * config.rules.n_players, 12, seed=2)
        texts = [r["completion"] for r in buffer if r["stage"] == Stage.PERFORM]
        assert {len(t) for t in texts} == {MATCHED_CHARS}
        assert {len(numbers_in(t)) for t in texts} == {8}
        assert all(t.endswith("}$") and "\\boxed{" in t for t in texts)


def test_matched_performer_takes_its_copy_and_fills_only_what_it_lacks():
    copy = "Ann has 12 apples and 30 pears; apples apples pears pears market market."
    perform = {"stage": Stage.PERFORM.index, "copy": copy}
    text = MatchedHeuristicAgent(seed=0).act([perform])[0]
    assert text.startswith("Problem: The source discusses apples, pears, market. Using its quantities 12, 30, ")
    assert HeuristicAgent().act([perform])[0] != text
    blank = [MatchedHeuristicAgent(seed=s).act([{**perform, "copy": ""}])[0] for s in range(6)]
    assert len(set(blank)) > 1 and {len(t) for t in blank} == {MATCHED_CHARS}
    with pytest.raises(ValueError, match="too short"):
        MatchedHeuristicAgent(chars=50).act([perform])


def test_soft_heuristic_draws_its_vote_from_a_softmax_over_the_heuristics_scores():
    copy = "The tank holds 40 litres and drains 5 litres a minute through a valve for 8 minutes."
    performances = [
        "mine",
        "The tank holds 40 litres, drains 5 litres a minute for 8 minutes: 40 - 5*8 = 0.",  # all three numbers
        "The tank holds 40 litres; the valve drains litres for 12 minutes.",  # one of three numbers
        "A train leaves at 9 and arrives at 11.",  # none
    ]
    obs = {**vote_obs(performances), "copy": copy}
    scores = HeuristicAgent()._scores(obs)
    assert scores[1] > scores[2] > scores[3]
    votes = [SoftHeuristicAgent(seed=k).act([obs])[0] for k in range(200)]
    q = votes[0].vote_distribution
    assert set(q) == {"2", "3", "4"} and math.isclose(sum(q.values()), 1.0)
    expected = np.exp([-scores[s] / 0.25 for s in (1, 2, 3)])
    assert np.allclose([q["2"], q["3"], q["4"]], expected / expected.sum())
    assert q["4"] > q["3"] > q["2"] > 0  # graded: the least consistent text draws the most, none draws nothing
    drawn = np.mean([voted(v.text) == 3 for v in votes])  # the cast vote follows the recorded distribution
    assert abs(drawn - q["4"]) < 0.12
    # near temperature 0 it is the heuristic; equal scores abstain as the heuristic does
    cold = SoftHeuristicAgent(temperature=1e-3).act([obs])[0]
    assert voted(cold.text) == voted(HeuristicAgent().act([obs])[0]) == 3 and cold.vote_distribution["4"] > 0.999
    tie = SoftHeuristicAgent().act([{**vote_obs(["a", "b", "b"]), "copy": copy}])[0]
    assert "<vote>N/A</vote>" in tie.text and tie.vote_distribution == {"N/A": 1.0}
    with pytest.raises(ValueError, match="temperature"):
        SoftHeuristicAgent(temperature=0)
    assert isinstance(agents.load("heuristic-soft:3"), SoftHeuristicAgent)


def _quantities(text: str) -> list[str]:
    return re.search(r"Using its quantities (.*?), compute", text).group(1).split(", ")


def _topics(text: str) -> list[str]:
    return re.search(r"The source discusses ([^.]*)\. Using", text).group(1).split(", ")


def test_disjoint_performers_write_from_their_own_share_of_the_copy():
    words = ["zqala", "zqbob", "zqcid", "zqdan", "zqeve", "zqfay", "zqgus", "zqhal", "zqivy"]
    # "1" and "2" (and terms such as "number") are in many documents: a disjoint performer never writes them
    copy = "A 90011 B 90012 1 C 90013 D 90014 2 E 90015 F 90016 G 90017 H 90018 I 90019 number number " + " ".join(
        f"{w} " * (20 - k) for k, w in enumerate(words)
    )
    texts = [
        DisjointHeuristicAgent(seed=0).act([{"stage": Stage.PERFORM.index, "copy": copy, "seat": k,
                                             "performances": ("",) * 3}])[0]
        for k in range(3)
    ]  # fmt: skip
    assert [_quantities(t) for t in texts] == [
        ["90011", "90014", "90017"], ["90012", "90015", "90018"], ["90013", "90016", "90019"]
    ]  # fmt: skip
    assert [_topics(t) for t in texts] == [["zqala", "zqdan", "zqgus"], ["zqbob", "zqeve", "zqhal"],
                                           ["zqcid", "zqfay", "zqivy"]]  # fmt: skip
    # the filler is whole sentences: every performance holds the same filler words, whatever its content's length
    assert len({frozenset(re.findall(r"\w+", t.split("sum.")[1].split("Solution")[0])) for t in texts}) == 1
    # an empty copy (the eased game's spy) draws its seat's share of decoy documents, in the same form
    blank = [
        DisjointHeuristicAgent(seed=s).act([{"stage": Stage.PERFORM.index, "copy": "", "seat": 1,
                                             "performances": ("",) * 5}])[0]
        for s in range(6)
    ]  # fmt: skip
    assert len(set(blank)) > 1 and {len(t) for t in blank} == {MATCHED_CHARS}
    assert {len(numbers_in(t)) for t in blank} == {8} and {len(_topics(t)) for t in blank} == {3}
    # a late seat of a large table, whose share of any decoy is short, still gets three of each
    late = DisjointHeuristicAgent(seed=0).act([{"stage": Stage.PERFORM.index, "copy": "", "seat": 9,
                                                "performances": ("",) * 10}])[0]  # fmt: skip
    assert len(_quantities(late)) == 3 and len(late) == MATCHED_CHARS


def test_no_rule_finds_the_spy_among_disjoint_performances_but_the_copy_does():
    for rule in RULES:
        if rule == "first-seat":  # reads no performance: the same votes whoever performs (matched-train's table)
            continue
        accuracy = bootstrap(_eased_games(rule, "heuristic-disjoint", 200)[0])
        assert accuracy.low <= 0.5 <= accuracy.high, (rule, accuracy)
    # civilians who perform alike make the spy the odd text; disjoint ones do not
    assert bootstrap(_eased_games("odd-one-out", "heuristic-matched", 60)[0]).mean > 0.9
    assert bootstrap(_eased_games("heuristic-disjoint", "heuristic-disjoint", 60)[0]).mean > 0.9


def _experiment():
    from tests.helpers import experiment_module

    return experiment_module("rule_baselines")


def test_committed_rule_table_is_current_and_on_the_experiments_games(tmp_path):
    committed = json.loads((ROOT / "lab" / "results" / "rule_baselines.json").read_text())
    disjoint = json.loads((ROOT / "lab" / "results" / "rule_baselines_disjoint.json").read_text())
    committed["settings"].update(disjoint["settings"])
    out = tmp_path / "rules.json"
    only = "eased-heldout,tuning-validation,matched-heldout,disjoint-heldout"
    assert _experiment().main(["--only", only, "--out", str(out)]) == 0
    fresh = json.loads(out.read_text())["settings"]
    for name, setting in fresh.items():
        for voter, entry in setting["voters"].items():
            assert entry["detection_accuracy"] == committed["settings"][name]["voters"][voter]["detection_accuracy"]
    assert fresh["eased-heldout"]["same_games"] and fresh["tuning-validation"]["same_games"]
    matched = [committed["settings"][s]["voters"] for s in ("matched-train", "matched-heldout")]
    assert all(voters[r]["at_chance"] for voters in matched for r in SINGLE_TEXT_RULES)
    # ...but civilians who perform from the same copy write the same text: the odd one out is the spy
    assert all(voters["odd-one-out"]["detection_accuracy"]["low"] > 0.9 for voters in matched)
    # ...and civilians who write from disjoint shares of their copy leave every rule at chance, not the copy
    for name in ("disjoint-train", "disjoint-heldout"):
        voters = disjoint["settings"][name]["voters"]
        assert all(voters[r]["at_chance"] for r in RULES), name
        assert voters["heuristic"]["detection_accuracy"]["low"] > 0.9


def test_readme_first_result_names_the_strongest_rule_on_the_same_games():
    committed = json.loads((ROOT / "lab" / "results" / "rule_baselines.json").read_text())
    eased = committed["settings"]["eased-heldout"]
    rule = eased["strongest_rule"]
    score = eased["voters"][rule]["detection_accuracy"]["mean"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.split("## Results", 1)[1].splitlines() if line.startswith("|")]
    first_row = rows[2]  # after the header and the separator
    assert "shorter" in first_row and f"`{rule}`" in first_row and f"{score:.3f}" in first_row
    assert not math.isnan(score)


def test_rule_experiment_refuses_bad_arguments_with_exit_2(capsys):
    experiment = _experiment()
    assert experiment.main(["--base-model", "detect-v1"]) == 2
    assert experiment.main(["--train-games", "0"]) == 2
    assert capsys.readouterr().err.count("error:") == 2


def test_rules_are_scored_on_played_games_by_the_performances_each_voter_saw():
    """agents.rules.played_shares: what the trainer logs as env/rule_*_accuracy and the self-play probe reports."""

    def perform(game, seat, text, round_=0):
        return {"game_id": game, "seat": seat, "stage": "perform", "round": round_, "completion": text}

    def vote(game, seat, spy, role="civilian", round_=0):
        return {"game_id": game, "seat": seat, "stage": "vote", "round": round_, "role": role, "spy_seat": spy}

    rows = [
        # game 0: the spy (seat 2) wrote the shortest text; seat 0 and seat 1 are civilians
        perform(0, 0, "a long text 1 2 3"), perform(0, 1, "a long text 1 2 4"), perform(0, 2, "short"),
        vote(0, 0, 2), vote(0, 1, 2), vote(0, 2, 2, role="spy"),
        # game 1: the spy (seat 0) ties on length with seat 2: half a hit for the rule from seat 1
        perform(1, 0, "same size"), perform(1, 1, "much longer one"), perform(1, 2, "same size"),
        vote(1, 1, 0), vote(1, 2, 0),
        perform(1, 0, "a later round is not scored", round_=1), vote(1, 1, 0, round_=1),
    ]  # fmt: skip
    assert played_shares(rows, RULES["shortest"]) == [1.0, 1.0, 0.5, 1.0]
    assert played_shares(rows, RULES["longest"]) == [0.0, 0.0, 0.5, 0.0]
    # seat 1 of game 1 sees "same size" twice: the spy's text is not the odd one there
    assert played_shares(rows, RULES["odd-one-out"])[2] == 0.5
