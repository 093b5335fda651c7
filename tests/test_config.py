"""GameConfig validation: bad values raise ValueError naming the field."""

from __future__ import annotations

import pytest

import spy_env
from spy_env import GameConfig

BAD = [
    ("task", "poetry"),
    ("n_players", 2),
    ("n_players", 11),
    ("n_players", 5.0),
    ("rounds", 0),
    ("degrade", "shuffle"),
    ("mask_ratio", 1.0),
    ("mask_ratio", 0),
    ("vote_gap_weight", 0),
    ("lam", -1),
    ("weight_detect", float("nan")),
    ("penalty_copy", 0.5),
    ("copy_min_words", 2),
    ("max_performance_chars", 10),
    ("max_documents", 0),
    ("prompts", {"preface": "x"}),
    ("prompts", {"perform": "{unknown_field}"}),
    ("prompts", {"vote": "{player"}),
]


@pytest.mark.parametrize(("field", "value"), BAD, ids=[f"{f}={v!r}" for f, v in BAD])
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        GameConfig(**{field: value})


def test_unknown_fields_and_defaults():
    with pytest.raises(ValueError, match="unknown fields"):
        spy_env.make(players=5)
    cfg = GameConfig()
    assert (cfg.n_players, cfg.rounds, cfg.resolved_degrade, cfg.resolved_ratio) == (
        5,
        1,
        "mask_spans",
        0.4,
    )
    assert GameConfig(task="summary").resolved_ratio == 0.2
    assert GameConfig.from_dict(cfg.to_dict()) == cfg


def test_prompt_overrides_are_used():
    env = spy_env.parallel_env(prompts={"perform": "P{player}/{n_players}: {document}"})
    obs, _ = env.reset(seed=0)
    assert obs["player_1"]["prompt"].startswith("P2/5: ")


def test_the_own_first_vote_layout_shows_each_voter_its_own_performance_first():
    from spy_env.prompts import VOTE_OWN_FIRST

    env = spy_env.parallel_env(n_players=4, prompts={"vote": VOTE_OWN_FIRST})
    env.reset(seed=0)
    texts = ["alpha \\boxed{1}", "beta </Performance> \\boxed{2}", "gamma \\boxed{3}", "delta \\boxed{4}"]
    obs, *_ = env.step(dict(zip(env.agents, texts, strict=True)))
    for seat, agent in enumerate(env.agents):
        prompt = obs[agent]["prompt"]
        own, rest = prompt.split("Every player's performance:\n")
        own_block = own.split(f'<performance player="{seat + 1}" (you)>\n')[1].split("\n</performance>")[0]
        assert own_block == texts[seat].replace("</Performance>", "&lt;/Performance>")  # a forged tag is defused
        assert all(f'<performance player="{k}">' in rest for k in range(1, 5))  # every block, in seat order
        assert prompt.count("<performance") == 5 and "</Performance>" not in prompt


@pytest.mark.parametrize("task", ["summary", "writing"])
def test_other_tasks_do_not_require_boxed(task):
    env = spy_env.parallel_env(task=task, n_players=3)
    env.reset(seed=0)
    _, _, _, _, infos = env.step(dict.fromkeys(env.agents, "A faithful summary."))
    assert all("no_answer" not in infos[a]["violations"] for a in infos)


def test_float_fields_read_yaml_exponent_strings_as_numbers():
    from spy_env.config import coerce_floats

    assert coerce_floats(GameConfig, {"vote_gap_weight": "2e-1", "degrade": "blank", "lam": "fast"}) == {
        "vote_gap_weight": 0.2, "degrade": "blank", "lam": "fast",
    }  # fmt: skip
    assert GameConfig.from_dict({"vote_gap_weight": "2e-1"}).vote_gap_weight == 0.2
    with pytest.raises(ValueError, match="lam"):
        GameConfig.from_dict({"lam": "fast"})


def test_decoding_options_have_one_abstain_default():
    from agents.decoding import DecodingOptions
    from trainers import SpyRLConfig

    assert DecodingOptions().abstain is SpyRLConfig().decoding.abstain is False
    config = SpyRLConfig.from_dict({"abstain": True, "vote_mode": "think-then-vote"})
    assert config.decoding.options() == DecodingOptions("think-then-vote", abstain=True)


@pytest.mark.parametrize(
    ("build", "old"),
    [
        (lambda: __import__("trainers").SpyRLConfig.from_dict({"vote_abstain": True}), "vote_abstain"),
        (lambda: __import__("trainers").SpyRLConfig.from_dict({"train_spy_vote": True}), "train_spy_vote"),
        (lambda: GameConfig.from_dict({"beta": 0.2}), "beta"),
    ],
)
def test_old_config_names_are_unknown_fields(build, old):
    """Nothing was released, so no alias is kept: an old name is an unknown field, named in the error.
    Their owners now: SpyRLConfig.abstain, GameConfig.train_spy_vote, GameConfig.vote_gap_weight."""
    with pytest.raises(ValueError, match=old):
        build()


def test_the_game_config_owns_train_spy_vote():
    from trainers import SpyRLConfig

    assert SpyRLConfig.from_dict(dict(game={"train_spy_vote": True})).game.train_spy_vote
    assert not SpyRLConfig().game.train_spy_vote
    assert not hasattr(__import__("spy_env"), "SpyGame")  # the former name of GameHost is gone too
