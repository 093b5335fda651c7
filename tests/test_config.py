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


def test_decoding_options_have_one_abstain_default_and_the_old_name_is_a_deprecated_alias():
    from agents.decoding import DecodingOptions
    from trainers import SpyRLConfig
    from trainers.policies import decoding_options

    assert DecodingOptions().abstain is SpyRLConfig().abstain is False
    with pytest.warns(DeprecationWarning, match=r"SpyRLConfig\.vote_abstain is deprecated.*use SpyRLConfig\.abstain"):
        config = SpyRLConfig.from_dict({"vote_abstain": True, "vote_mode": "think-then-vote"})
    assert config.abstain is True and config.vote_abstain is None
    assert decoding_options(config) == DecodingOptions("think-then-vote", abstain=True)
    disagree = r"vote_abstain \(deprecated\) and SpyRLConfig\.abstain disagree"
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match=disagree):
        SpyRLConfig(vote_abstain=False, abstain=True)


def test_old_config_names_are_deprecated_aliases_of_the_one_owner():
    """GameConfig.beta (the reward's vote-gap weight, not the trainer's KL β) is vote_gap_weight;
    SpyRLConfig.train_spy_vote lives in the game's config only (the game's copy used to win)."""
    from trainers import SpyRLConfig

    with pytest.warns(DeprecationWarning, match=r"GameConfig\.beta is deprecated.*GameConfig\.vote_gap_weight"):
        game = GameConfig.from_dict({"beta": "2e-1"})
    assert game.vote_gap_weight == 0.2 and game.beta is None
    negative = r"GameConfig\.vote_gap_weight must be a finite number > 0"
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match=negative):
        GameConfig(beta=-1.0)
    with pytest.warns(DeprecationWarning, match=r"SpyRLConfig\.train_spy_vote is deprecated"):
        config = SpyRLConfig(train_spy_vote=True)
    assert config.game == {"train_spy_vote": True} and config.game_config().train_spy_vote
    assert config.train_spy_vote is None
    with (
        pytest.raises(ValueError, match=r"train_spy_vote \(deprecated\) and game\.train_spy_vote disagree"),
        pytest.warns(DeprecationWarning),
    ):
        SpyRLConfig(train_spy_vote=True, game={"train_spy_vote": False})
    assert SpyRLConfig(game={"train_spy_vote": True}).game_config().train_spy_vote
