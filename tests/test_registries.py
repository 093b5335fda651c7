"""Every strategy chosen by a setting's name is a registered object that says what it can do.

- The library (``spy_env``, ``agents``, ``trainers``, ``spyrl``) never compares these settings' names as
  strings: rollout engines (``rollout.generation``), vote modes and answers (``decoding.vote_mode``,
  ``decoding.answer``), performing rewards (``advantages.perform_reward``) and mini-batch units
  (``update.mini_batch_unit``). It looks the name up in its registry and asks the object.
- Every registry refuses a name registered twice, and a setting naming no registered strategy is
  refused by name, with the registered names.
- The trainer's ``decoding`` section is the agents' ``DecodingOptions`` record with the sampling
  settings added: no field of the record is declared twice, and configs keep their keys.
- A new entry registered from outside is used, by its capabilities alone.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import fields
from pathlib import Path

import pytest

from agents.decoding import ANSWER_MODES, VOTE_MODES, AnswerMode, DecodingOptions, VoteMode
from agents.registry import BACKENDS, Registry, register_backend
from spy_env.config import GameConfig
from spy_env.stage import Stage
from trainers import SpyRLConfig
from trainers.engines import ROLLOUT_ENGINES, RolloutEngine
from trainers.mini_batch_units import MINI_BATCH_UNITS, MiniBatchUnit
from trainers.samples import PERFORM_REWARDS, register_perform_reward, stage_rewards
from trainers.sections import AdvantageConfig, DecodingConfig, RolloutConfig, UpdateConfig, VLLMConfig
from trainers.update import mini_batch_size

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("spy_env", "agents", "trainers", "spyrl")

# setting -> (section, its registry): the names the library must never compare
SETTINGS = {
    "generation": ("rollout", ROLLOUT_ENGINES),
    "vote_mode": ("decoding", VOTE_MODES),
    "answer": ("decoding", ANSWER_MODES),
    "perform_reward": ("advantages", PERFORM_REWARDS),
    "mini_batch_unit": ("update", MINI_BATCH_UNITS),
}
NAMES = {name: setting for setting, (_, registry) in SETTINGS.items() for name in registry}


def _strings(node: ast.AST) -> list[str]:
    """The string constants of a comparison's operand (a tuple, list or set of them for ``in``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for element in node.elts for s in _strings(element)]
    return []


def name_comparisons(source: str, where: str) -> list[str]:
    """``where:line: code`` of each comparison (``==``, ``!=``, ``in``, ``not in``, a ``case``) of a
    registered strategy's name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = (node.left, *node.comparators)
        elif isinstance(node, ast.MatchValue):
            operands = (node.value,)
        else:
            continue
        named = sorted({s for operand in operands for s in _strings(operand)} & set(NAMES))
        if named:
            settings = ", ".join(sorted({NAMES[n] for n in named}))
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}  ({settings})")
    return found


def test_the_library_asks_registered_strategies_and_never_compares_their_names():
    """``generation == "hf"``, ``vote_mode != "constrained"``, ``answer == "boxed"``,
    ``perform_reward == "expected"``, ``mini_batch_unit == "documents"``: each is a question for the
    registered object (``rollout.engine.records_votes``, ``decoding.vote.one_forward_pass``, ...)."""
    found = [
        hit
        for package in LIBRARY
        for path in sorted((ROOT / package).rglob("*.py"))
        for hit in name_comparisons(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert found == []


def test_the_name_check_finds_every_form_of_comparison():
    source = (
        'if rollout.generation == "hf": pass\n'
        'if decoding.vote_mode != "constrained": pass\n'
        'if answer in ("free", "boxed"): pass\n'
        'if "expected" == x and y: pass\n'
        'match unit:\n    case "documents": pass\n'
        'if finish == "length" or text == "hello": pass\n'
        "message = f\"{name!r} is not 'hf'\"\n"
    )
    assert [hit.split(": ", 1)[0] for hit in name_comparisons(source, "m.py")] == [
        "m.py:1",
        "m.py:2",
        "m.py:3",
        "m.py:4",
        "m.py:6",
    ]
    assert name_comparisons(source, "m.py")[2].endswith("(answer)")


def test_a_registry_refuses_a_name_twice_and_names_its_setting_when_a_name_is_unknown():
    registry: Registry[int] = Registry("colour")
    assert registry.register("red", 1) == 1

    @registry.register("blue")
    def blue() -> int:
        return 2

    assert list(registry) == ["red", "blue"] and registry.of("blue") is blue
    with pytest.raises(ValueError, match="a colour named 'red' is already registered"):
        registry.register("red", 3)
    with pytest.raises(ValueError, match="a colour named 'blue' is already registered"):
        registry.register("blue")(lambda: 4)
    assert registry["red"] == 1 and registry["blue"] is blue  # the first stays
    with pytest.raises(ValueError, match=r"unknown colour 'green'; expected one of \['blue', 'red'\]"):
        registry.of("green")
    assert [1] not in registry and None not in registry  # an unhashable or non-string value is no name


def _every_registry() -> dict[str, Registry]:
    from trainers.choices import VOTE_GRADIENTS
    from trainers.groups import ADVANTAGE_GROUPINGS
    from trainers.loss import AGGREGATIONS

    return {
        "backend": BACKENDS,
        "generation": ROLLOUT_ENGINES,
        "vote_mode": VOTE_MODES,
        "answer": ANSWER_MODES,
        "perform_reward": PERFORM_REWARDS,
        "mini_batch_unit": MINI_BATCH_UNITS,
        "loss_type": AGGREGATIONS,
        "vote_gradient": VOTE_GRADIENTS,
        "detect_advantage_groups": ADVANTAGE_GROUPINGS,
    }


@pytest.mark.parametrize("setting", list(_every_registry()))
def test_every_registry_refuses_a_name_registered_twice(setting):
    registry = _every_registry()[setting]
    assert registry.setting == setting
    before = dict(registry)
    for name, entry in before.items():
        with pytest.raises(ValueError, match=f"a {re.escape(setting)} named {re.escape(repr(name))} is already"):
            registry.register(name, entry)
    assert dict(registry) == before


def test_the_register_functions_refuse_a_registered_name():
    from trainers.choices import VOTE_GRADIENTS, register_vote_gradient
    from trainers.groups import ADVANTAGE_GROUPINGS, register_advantage_grouping
    from trainers.loss import AGGREGATIONS, register_aggregation

    with pytest.raises(ValueError, match="already registered"):
        register_aggregation("grpo", AGGREGATIONS["grpo"])
    with pytest.raises(ValueError, match="already registered"):
        register_vote_gradient("expected", VOTE_GRADIENTS["expected"])
    with pytest.raises(ValueError, match="already registered"):
        register_advantage_grouping("game", ADVANTAGE_GROUPINGS["game"])
    with pytest.raises(ValueError, match="already registered"):
        register_perform_reward("expected")(lambda rows, buffer, config, game: ([], []))
    with pytest.raises(ValueError, match="already registered"):
        register_backend("hf", help="a second hf")(lambda argument, **kwargs: None)


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_a_setting_naming_no_registered_strategy_is_refused_with_the_registered_names(setting):
    section, registry = SETTINGS[setting]
    names = re.escape(str(tuple(registry)))
    with pytest.raises(ValueError, match=rf"^SpyRLConfig\.{section}\.{setting} must be one of {names}, got 'nope'$"):
        SpyRLConfig.from_dict({f"{section}.{setting}": "nope"})
    with pytest.raises(ValueError, match=rf"SpyRLConfig\.{section}\.{setting} must be one of {names}"):
        SpyRLConfig().with_overrides([f"{setting}=nope"])


def test_the_agents_record_names_its_own_field_when_a_mode_is_unknown():
    with pytest.raises(ValueError, match=r"^DecodingOptions\.vote_mode must be one of \('free', 'constrained', "):
        DecodingOptions(vote_mode="greedy")
    with pytest.raises(ValueError, match=r"^DecodingOptions\.answer must be one of \('free', 'boxed'\), got 3$"):
        DecodingOptions(answer=3)
    with pytest.raises(ValueError, match=r"^SpyRLConfig\.decoding\.think_tokens must be an integer >= 1, got 0$"):
        DecodingConfig(think_tokens=0)


def test_the_built_in_strategies_say_what_the_former_comparisons_asked():
    """The capabilities reproduce the comparisons they replace (``generation == "hf"`` and so on)."""
    hf, colocate, server = (ROLLOUT_ENGINES[n] for n in ("hf", "vllm-colocate", "vllm-server"))
    assert (hf.records_votes, hf.decodes_each_request, hf.syncs_weights, hf.runs_sharded) == (True, True, False, False)
    assert not (colocate.records_votes or colocate.decodes_each_request or colocate.remote)
    assert colocate.colocated and colocate.syncs_weights and colocate.runs_sharded and colocate.trl_mode == "colocate"
    assert server.remote and server.syncs_weights and not server.colocated and server.trl_mode == "server"
    assert RolloutConfig(generation="vllm-colocate").decodes_each_request
    assert not RolloutConfig(generation="vllm-colocate", vllm=VLLMConfig(enable_sleep_mode=True)).decodes_each_request
    assert not RolloutConfig(generation="vllm-server").drives_colocated_engine

    free, constrained, thinking = (VOTE_MODES[n] for n in ("free", "constrained", "think-then-vote"))
    assert (free.scores_choices, free.uses_thinking, free.one_forward_pass) == (False, False, False)
    assert constrained.one_forward_pass and not constrained.allows_abstain
    assert thinking.scores_choices and thinking.uses_thinking and thinking.allows_abstain
    assert not thinking.one_forward_pass
    assert [n for n, mode in ANSWER_MODES.items() if mode.forces_answer] == ["boxed"]

    assert not PERFORM_REWARDS["sampled"].needs_vote_distributions and not PERFORM_REWARDS["sampled"].continuous
    assert PERFORM_REWARDS["expected"].needs_vote_distributions and PERFORM_REWARDS["expected"].continuous

    assert MINI_BATCH_UNITS["samples"].counts_samples and MINI_BATCH_UNITS["samples"].updates(128, 64) == 0
    assert not MINI_BATCH_UNITS["documents"].counts_samples
    assert [MINI_BATCH_UNITS["documents"].updates(d, 64) for d in (1, 64, 65, 128)] == [1, 1, 2, 2]


def test_the_decoding_section_is_the_agents_record_with_sampling_added():
    """One record: the section declares none of the record's fields again, and gives the record alone."""
    record = [f.name for f in fields(DecodingOptions)]
    section = [f.name for f in fields(DecodingConfig)]
    assert issubclass(DecodingConfig, DecodingOptions) and section[: len(record)] == record
    assert set(section) - set(record) == {"temperature", "perform_temperature", "top_p", "max_completion_tokens"}
    assert not set(record) & set(inspect.get_annotations(DecodingConfig))
    assert all(f.metadata.get("help") for f in fields(DecodingOptions))  # their helps, written once
    config = SpyRLConfig.from_dict({"decoding.vote_mode": "think-then-vote", "abstain": True, "temperature": 0.7})
    assert config.decoding.options() == DecodingOptions("think-then-vote", abstain=True)
    assert type(config.decoding.options()) is DecodingOptions


def test_saved_configs_keep_their_keys_and_values(tmp_path):
    """A decoding section as runs saved it (the sampling keys first) loads unchanged; YAML, ``--set`` keys and
    the settings' string values are as before."""
    saved = {
        "decoding": {
            "temperature": 1.0,
            "perform_temperature": None,
            "top_p": 1.0,
            "max_completion_tokens": 64,
            "vote_mode": "constrained",
            "think_tokens": 32,
            "abstain": False,
            "answer": "boxed",
            "answer_tokens": 12,
        },
        "rollout": {"generation": "vllm-colocate"},
        "advantages": {"perform_reward": "sampled"},
        "update": {"mini_batch_unit": "documents"},
    }
    config = SpyRLConfig.from_dict(saved)
    assert config.to_dict()["decoding"] == saved["decoding"]
    assert (config.rollout.generation, config.update.mini_batch_unit) == ("vllm-colocate", "documents")
    path = tmp_path / "run.yaml"
    path.write_text(config.to_yaml(), encoding="utf-8")
    assert "vote_mode: constrained" in path.read_text() and "generation: vllm-colocate" in path.read_text()
    assert SpyRLConfig.from_yaml(path) == config
    changed = config.with_overrides(["decoding.vote_mode=think-then-vote", "rollout.generation=hf"])
    assert (changed.decoding.vote_mode, changed.rollout.generation) == ("think-then-vote", "hf")


# --- recipes: a strategy registered from outside is used by what it says it can do --------------------


@pytest.fixture
def scratch():
    """Registrations made by a test, removed afterwards."""
    made: list[tuple[Registry, str]] = []
    yield made
    for registry, name in made:
        del registry[name]


def test_a_registered_vote_mode_shapes_votes_by_its_capabilities(scratch):
    """A bare tag that may also be ``N/A``: the vote pattern follows from ``scores_choices`` and
    ``allows_abstain`` alone."""
    VOTE_MODES.register("tag-or-abstain", VoteMode(scores_choices=True, allows_abstain=True))
    scratch.append((VOTE_MODES, "tag-or-abstain"))
    options = DecodingOptions("tag-or-abstain", abstain=True)
    assert options.vote.one_forward_pass and options.offers_abstain
    assert options.vote_pattern([{"stage": 1, "vote_targets": [True, False, True]}]) == "<vote>(?:1|3|N/A)</vote>"
    assert SpyRLConfig.from_dict({"vote_mode": "tag-or-abstain"}).decoding.vote.allows_abstain


def test_a_registered_answer_mode_is_refused_where_an_engine_cannot_force_it(scratch):
    ANSWER_MODES.register("forced-short", AnswerMode(forces_answer=True))
    scratch.append((ANSWER_MODES, "forced-short"))
    with pytest.raises(ValueError, match=r"SpyRLConfig\.decoding\.answer must be 'free' with rollout\.generation="):
        SpyRLConfig.from_dict({"answer": "forced-short", "generation": "vllm-server"})
    assert SpyRLConfig.from_dict({"answer": "forced-short"}).decoding.ending.forces_answer


def test_a_registered_performing_reward_is_the_performing_stages_reward(scratch):
    @register_perform_reward("halved")
    def halved(rows, buffer, config, game):
        """Half the env's performing reward, penalties as recorded."""
        return [0.5 * r["reward_perform"] for r in rows], [r["reward_penalty"] for r in rows]

    scratch.append((PERFORM_REWARDS, "halved"))
    rows = [{"reward_perform": 1.0, "reward_penalty": -0.5, "reward": 0.5, "reward_detect": 0.0}]
    config = AdvantageConfig(perform_reward="halved")
    assert stage_rewards(rows, Stage.PERFORM, config, GameConfig()) == ([0.5], [-0.5])
    assert stage_rewards(rows, Stage.VOTE, config, GameConfig()) == ([0.0], [-0.5])  # votes: as recorded
    assert SpyRLConfig.from_dict({"perform_reward": "halved", "perform_group_norm": True})  # not continuous


def test_a_registered_mini_batch_unit_sets_the_optimizer_steps(scratch):
    MINI_BATCH_UNITS.register("halves", MiniBatchUnit(lambda documents, size: 2))
    scratch.append((MINI_BATCH_UNITS, "halves"))
    config = UpdateConfig(mini_batch_unit="halves", mini_batch_size=5, micro_batch_size=2)  # counts no samples
    assert mini_batch_size(config, 128, 100) == 50


def test_a_registered_rollout_engine_is_checked_by_its_capabilities(scratch):
    """An engine that records no votes cannot feed the expected performing reward; one that cannot run
    sharded is refused under FSDP, named with the engines that can."""
    from trainers.processes import check_sharding

    ROLLOUT_ENGINES.register("toy", RolloutEngine(syncs_weights=False, runs_sharded=False))
    scratch.append((ROLLOUT_ENGINES, "toy"))
    with pytest.raises(ValueError, match=r"SpyRLConfig\.advantages\.perform_reward must be 'sampled' unless"):
        SpyRLConfig.from_dict({"generation": "toy", "vote_mode": "constrained", "perform_reward": "expected"})
    with pytest.raises(ValueError, match=r"must be 'vllm-colocate' or 'vllm-server' under FSDP .*, got 'toy'"):
        check_sharding("toy", 0, "fsdp")
    check_sharding("vllm-server", 0, "fsdp")
