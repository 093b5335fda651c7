"""Golden tests: scripted games whose rewards were computed by hand from the formulas in docs/GUIDE.md (the game and its rewards)."""

from __future__ import annotations

import pytest

import spy_env
from tests.helpers import GOOD, play_scripted, vote

P = [f"player_{i}" for i in range(5)]


def approx(values):
    return pytest.approx(values, abs=1e-9)


def test_all_valid_votes():
    # Spy = Player 3 (seat 2). Votes (1-based): 3, 3, 1, 3, 2 -> received P1:1 P2:1 P3:3.
    # m_u = 3, civilians [1, 1, 0, 0] -> mean 0.5, gap 2.5.
    env = spy_env.parallel_env()
    [(rewards, terms, infos)] = play_scripted(env, [(None, [vote(3), vote(3), vote(1), vote(3), vote(2)])], spy_seat=2)
    perform = [infos[a]["reward_components"]["perform"] for a in P]
    detect = [infos[a]["reward_components"]["detect"] for a in P]
    assert perform == approx([0.125, 0.125, -2.5, 1.125, 1.125])
    assert detect == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert [rewards[a] for a in P] == approx([1.125, 1.125, -2.5, 2.125, 1.125])
    assert all(terms.values())
    assert infos["player_0"]["truth"]["spy_seat"] == 2
    assert infos["player_0"]["truth"]["votes"] == [[2, 2, 0, 2, 1]]


def test_abstentions_and_invalid_votes():
    # N/A (no penalty), missing tag, self-vote (not allowed), out of range, valid.
    env = spy_env.parallel_env()
    replies = [vote("N/A"), "I refuse to vote", vote(3), vote(9), vote(3)]
    [(rewards, _, infos)] = play_scripted(env, [(None, replies)], spy_seat=2)
    # Only P5 voted validly, for the spy: m_u = 1, civilians all 0 -> gap 1.
    assert [infos[a]["reward_components"]["perform"] for a in P] == approx([0.25, 0.25, -1.0, 0.25, 0.25])
    assert [infos[a]["reward_components"]["detect"] for a in P] == [0, 0, 0, 0, 1]
    assert [infos[a]["reward_components"]["vote_penalty"] for a in P] == approx([0, -0.1, -0.1, -0.1, 0])
    assert [rewards[a] for a in P] == approx([0.25, 0.15, -1.1, 0.15, 1.25])
    assert infos["player_1"]["violations"] == ["missing_vote"]
    assert infos["player_2"]["violations"] == ["self_vote"]
    assert infos["player_3"]["violations"] == ["out_of_range_vote"]
    assert infos["player_0"]["violations"] == []


def test_spy_own_vote_when_allowed():
    env = spy_env.parallel_env(allow_self_vote=True)
    [(rewards, _, infos)] = play_scripted(env, [(None, [vote(3)] * 5)], spy_seat=2)
    # m_u = 5, civilians 0 -> gap 5: spy -5 (+1 detection for voting itself), civilians 5/4.
    assert [infos[a]["reward_components"]["detect"] for a in P] == [1.0] * 5
    assert [rewards[a] for a in P] == approx([2.25, 2.25, -4.0, 2.25, 2.25])


def test_performance_penalties():
    env = spy_env.parallel_env()
    env.reset(seed=0, options={"spy_seat": 2, "document_index": 0})
    source = env.game.document.text.split()
    copied = "Here is my problem: " + " ".join(source[:25]) + " $\\boxed{1}$"
    long = "$\\boxed{1}$ " + "word " * 2_000
    performances = ["A problem with no final answer.", copied, GOOD, long, GOOD]
    [(_, _, infos)] = play_scripted(env, [(performances, [vote(3)] * 5)], spy_seat=2)
    assert infos["player_0"]["reward_components"]["perform_penalty"] == pytest.approx(-0.1)
    assert infos["player_1"]["reward_components"]["perform_penalty"] == pytest.approx(-0.5)
    assert infos["player_2"]["reward_components"]["perform_penalty"] == 0.0
    assert infos["player_3"]["reward_components"]["perform_penalty"] == pytest.approx(-0.1)
    game = env.game
    assert game.log[0].performances[0].violations == ("no_answer",)
    assert game.log[0].performances[1].violations == ("verbatim_copy",)
    assert game.log[0].performances[3].violations == ("overlength",)
    assert len(game.log[0].performances[3].text) == env.config.limits.max_performance_chars


def test_ties_and_elimination_over_three_rounds():
    env = spy_env.parallel_env(rounds=3)
    results = play_scripted(
        env,
        [
            # Round 1: P1 and P2 tie with 2 votes each -> nobody is eliminated.
            (None, [vote(2), vote(1), vote(1), vote(2), vote("N/A")]),
            # Round 2: P4 gets 4 votes -> eliminated.
            (None, [vote(4), vote(4), vote(4), vote(1), vote(4)]),
            # Round 3 (P1, P2, P3, P5 alive): the spy P3 gets 3 votes -> caught, game over.
            (None, [vote(3), vote(3), vote(1), None, vote(3)]),
        ],
        spy_seat=2,
    )
    (r1, t1, i1), (r2, t2, i2), (r3, t3, i3) = results
    assert [r1[a] for a in P] == approx([-1.25, -1.25, 1.0, 0.75, 0.75])
    assert not any(t1.values()) and i1["player_0"]["eliminated"] is None
    assert [r2[a] for a in P] == approx([-0.0625, 0.9375, 1.25, -3.0625, 0.9375])
    assert t2["player_3"] and not t2["player_0"] and i2["player_0"]["eliminated"] == 3
    alive = ["player_0", "player_1", "player_2", "player_4"]
    assert set(r3) == set(alive)
    assert [r3[a] for a in alive] == approx([2 / 9 + 1, 11 / 9 + 1, -8 / 3, 11 / 9 + 1])
    assert all(t3.values()) and env.agents == []
    truth = i3["player_0"]["truth"]
    assert truth["eliminated"] == [None, 3, 2] and truth["spy_caught"] and truth["rounds_played"] == 3


def test_game_ends_when_two_players_remain():
    env = spy_env.parallel_env(n_players=3, rounds=5)
    # Seat 0 is the spy; both others... P1 votes P2, P2 votes P3, P3 votes P2 -> P2 eliminated.
    [(_, terms, infos)] = play_scripted(env, [(None, [vote(2), vote(3), vote(2)])], spy_seat=0)
    assert all(terms.values())
    assert infos["player_0"]["truth"]["eliminated"] == [1]
    assert not infos["player_0"]["truth"]["spy_caught"]
