"""GameConfig: its sections, the ways of building one, and validation (bad values raise ValueError
naming the setting by its place)."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

import spy_env
from spy_env import GameConfig
from spy_env.config import CorpusSource, Limits, Penalties, Rewards, Rules
from spy_env.sections import flat_fields, subsections

# computed with the code before the sections (the flat GameConfig): the sections leave it unchanged
DEFAULT_SETUP_FINGERPRINT = "294210a7fd2c10dd0fd7aa804724f4a59dcb8e71cd3a5891845b6d4fa1abce9d"

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
    """By flat name or by section, a bad value is named by its place: ``GameConfig.<section>.<field>``."""
    section = SECTION_OF[field]
    with pytest.raises(ValueError, match=rf"GameConfig\.{section}\.{field}"):
        GameConfig(**{field: value})
    with pytest.raises(ValueError, match=rf"GameConfig\.{section}\.{field}"):
        GameConfig.from_dict({section: {field: value}})


SECTION_OF = {name: section for name, (section, _) in flat_fields(GameConfig).items()}


def test_each_setting_has_one_section_with_help():
    sections = ["rules", "rewards", "penalties", "limits", "source"]
    assert list(subsections(GameConfig)) == sections == list(dict.fromkeys(SECTION_OF.values()))
    assert list(SECTION_OF.values()).count("rules") == 10
    assert all(f.metadata["help"] for cls in (Rules, Rewards, Penalties, Limits, CorpusSource) for f in fields(cls))
    assert all(cls.__dataclass_params__.frozen for cls in (GameConfig, Rules, Rewards, Penalties, Limits, CorpusSource))
    with pytest.raises(ValueError, match=r"GameConfig\.rules\.n_players must be an integer in 3\.\.10, got 2"):
        GameConfig(n_players=2)


def test_every_way_of_building_a_game_gives_the_same_config():
    """Flat names (the recorded form, ``spy_env.make``'s keywords), sections as records or mappings, dotted
    keys, and ``dataclasses.replace`` with a flat name."""
    want = GameConfig(rules=Rules(n_players=4, rounds=2), limits=Limits(max_document_chars=600))
    assert want.rules.n_players == 4 and want.rewards == Rewards() and want.limits.max_document_chars == 600
    for built in (
        GameConfig(n_players=4, rounds=2, max_document_chars=600),
        GameConfig(rules={"n_players": 4, "rounds": 2}, max_document_chars=600),
        GameConfig(rules=Rules(n_players=4), rounds=2, max_document_chars=600),  # the flat value is set on it
        GameConfig.from_dict({"n_players": 4, "rounds": 2, "max_document_chars": 600}),
        GameConfig.from_dict({"rules": {"n_players": 4, "rounds": 2}, "limits": {"max_document_chars": 600}}),
        GameConfig.from_dict({"rules.n_players": 4, "rounds": 2, "limits.max_document_chars": 600}),
        replace(GameConfig(n_players=4, max_document_chars=600), rounds=2),
        spy_env.parallel_env(n_players=4, rounds=2, max_document_chars=600).config,
        spy_env.parallel_env(GameConfig(n_players=4), rounds=2, max_document_chars=600).config,
    ):
        assert built == want
    assert GameConfig.from_dict(want.to_dict()) == want == GameConfig.from_dict(want.to_dict(nested=True))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"n_players": 4, "rules": {"n_players": 4}}, r"\['n_players'\] given twice"),
        ({"rules.n_players": 4, "rules": {"n_players": 4}}, r"\['n_players'\] given twice"),
        ({"rules": {"lam": 1.0}}, r"GameConfig\.rules: unknown fields \['lam'\]"),
        ({"rules": {"n_player": 4}}, r"GameConfig\.rules: unknown fields \['n_player'\]"),
        ({"rule.n_players": 4}, r"GameConfig: unknown fields \['rule\.n_players'\]"),
        ({"rules": 4}, r"GameConfig\.rules must be a mapping of its fields, got int"),
        ({"beta": 0.2}, r"GameConfig: unknown fields \['beta'\]"),
    ],
)
def test_a_setting_given_twice_or_unknown_is_refused_by_name(values, message):
    with pytest.raises(ValueError, match=message):
        GameConfig.from_dict(values)


def test_constructor_refuses_unknown_settings_and_sections_of_another_kind():
    with pytest.raises(ValueError, match=r"GameConfig: unknown fields \['players'\]"):
        GameConfig(players=4)
    with pytest.raises(ValueError, match=r"GameConfig\.rules must be a Rules or a mapping of its fields, got Rewards"):
        GameConfig(rules=Rewards())


def test_the_recorded_form_is_flat_in_its_recorded_order():
    """Buffers, run configs and leaderboard sets record ``to_dict()``: flat names in this order, unchanged by
    the sections (a leaderboard set's text, hashed, holds it)."""
    recorded = [
        "task",
        "n_players",
        "rounds",
        "degrade",
        "mask_ratio",
        "mask_placeholder",
        "relevant_spans_first",
        "vote_gap_weight",
        "lam",
        "weight_detect",
        "weight_perform",
        "weight_penalty",
        "penalty_no_answer",
        "penalty_copy",
        "penalty_overlength",
        "penalty_invalid_vote",
        "copy_min_words",
        "max_performance_chars",
        "max_vote_chars",
        "max_document_chars",
        "allow_self_vote",
        "train_spy_vote",
        "corpus",
        "max_documents",
        "prompts",
    ]
    assert list(GameConfig().to_dict()) == recorded and sorted(recorded) == sorted(SECTION_OF)
    nested = GameConfig(corpus=[{"id": "a", "text": "x"}]).to_dict(nested=True)
    assert list(nested) == ["rules", "rewards", "penalties", "limits", "source"]
    assert nested["source"] == {"corpus": "<1 rows>", "max_documents": None}
    from spy_env.ledger import fingerprint

    # the held-out evaluations' fingerprint of the default game (spy_env/heldout.py), as before the sections
    setup = {k: v for k, v in GameConfig().to_dict().items() if k not in ("corpus", "max_documents")}
    assert fingerprint(setup) == DEFAULT_SETUP_FINGERPRINT


def test_unknown_fields_and_defaults():
    with pytest.raises(ValueError, match="unknown fields"):
        spy_env.make(players=5)
    rules = GameConfig().rules
    assert (rules.n_players, rules.rounds, rules.resolved_degrade, rules.resolved_ratio) == (5, 1, "mask_spans", 0.4)
    assert GameConfig(task="summary").rules.resolved_ratio == 0.2
    cfg = GameConfig()
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
    from spy_env.sections import coerce_floats

    given = {"vote_gap_weight": "2e-1", "degrade": "blank", "lam": "fast"}
    assert coerce_floats(GameConfig, given) == {**given, "vote_gap_weight": 0.2}
    assert GameConfig.from_dict({"vote_gap_weight": "2e-1"}).rewards.vote_gap_weight == 0.2
    assert GameConfig.from_dict({"rewards": {"lam": "1e-1"}}).rewards.lam == 0.1
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
    Their owners now: SpyRLConfig.abstain, GameConfig.rules.train_spy_vote, GameConfig.rewards.vote_gap_weight."""
    with pytest.raises(ValueError, match=old):
        build()


def test_the_game_config_owns_train_spy_vote():
    from trainers import SpyRLConfig

    assert SpyRLConfig.from_dict(dict(game={"train_spy_vote": True})).game.rules.train_spy_vote
    assert SpyRLConfig.from_dict({"game.rules.train_spy_vote": True}).game.rules.train_spy_vote
    assert not SpyRLConfig().game.rules.train_spy_vote
    assert not hasattr(__import__("spy_env"), "SpyGame")  # the former name of GameHost is gone too


def test_the_vllm_block_reads_flat_names_and_records_them():
    """``rollout.vllm`` is a section of its own; its settings keep their flat names ``vllm_<name>`` on input
    (run configs recorded before the block) and in ``to_dict`` (what run configs record)."""
    from trainers import SpyRLConfig
    from trainers.sections import VLLMConfig

    nested = SpyRLConfig.from_dict({"rollout": {"vllm": {"server_url": "http://h:1", "enable_sleep_mode": True}}})
    assert nested.rollout.vllm == VLLMConfig(server_url="http://h:1", enable_sleep_mode=True)
    assert SpyRLConfig.from_dict({"vllm_server_url": "http://h:1", "vllm_enable_sleep_mode": True}) == nested
    assert SpyRLConfig.from_dict({"rollout.vllm.server_url": "http://h:1", "vllm_enable_sleep_mode": True}) == nested
    assert nested.with_overrides(["rollout.vllm.group_port=5"]).rollout.vllm.group_port == 5
    recorded = nested.to_dict()["rollout"]
    assert recorded["vllm_server_url"] == "http://h:1" and "vllm" not in recorded
    assert SpyRLConfig.from_dict(nested.to_dict()) == nested
    with pytest.raises(ValueError, match=r"SpyRLConfig\.rollout: \['vllm_group_port'\] given twice"):
        SpyRLConfig.from_dict({"rollout": {"vllm_group_port": 5, "vllm": {"group_port": 6}}})
    with pytest.raises(ValueError, match=r"SpyRLConfig\.rollout\.vllm\.group_port must be a port number"):
        SpyRLConfig.from_dict({"vllm_group_port": 70000})
    with pytest.raises(ValueError, match=r"SpyRLConfig\.rollout\.vllm: unknown fields \['port'\]"):
        SpyRLConfig.from_dict({"rollout": {"vllm": {"port": 1}}})


def test_print_config_shows_each_section_of_the_game_and_the_vllm_block_with_their_help(tmp_path):
    from trainers import SpyRLConfig

    config = SpyRLConfig.preset("cpu-smoke")
    text = config.to_yaml()
    assert "game:\n  # Task, players, rounds, degradation, votes and prompts.\n  rules:\n" in text
    assert "    # Players per game, 3..10.\n    n_players: 3\n" in text
    assert "  vllm:\n    # Context window of the vLLM engine" in text
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    assert SpyRLConfig.from_yaml(path) == config
