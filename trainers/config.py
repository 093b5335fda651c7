"""``SpyRLConfig``: every knob of SpyRL's GRPO trainer, with the paper's recipe as defaults.

Presets (``SpyRLConfig.preset(name, **overrides)``, values in :mod:`trainers.presets`):

- ``qwen3-4b-paper``: the reported recipe (GPU) read through verl (docs/FIDELITY.md):
  Qwen3-4B-Instruct-2507, lr 1e-6, 128 documents × 8 games per iteration, mini-batch 128
  *documents* (one on-policy update per iteration), token-mean loss (``dapo``), ε 0.2, β 0.001
  with verl's ``low_var_kl``, the spy's vote trained and in the Eq. 5 group (self-votes legal),
  RAE seeded by its first batch, Nemotron-CC-Math-v1 ``4plus`` (streamed, ``HF_TOKEN``) with 20%
  held out, silent span removal, 100 iterations, prompts up to 12288 and responses up to 4096
  tokens, 5 players, 1 round, bf16, gradient checkpointing, colocated vLLM rollouts
  (``generation=vllm-server`` for a separate ``trl vllm-serve``).
- ``smollm2-cpu``: SmolLM2-135M-Instruct on CPU, tiny batches, one iteration of each stage.
- ``smollm2-selfplay``: SmolLM2 learning to detect the spy on CPU: an eased
  3-player game, constrained votes, ``vote_gradient=expected`` (not the paper's estimator), ``batch``
  advantage groups, detection only.
- ``cpu-smoke``: a tiny random model built on the fly; minutes on CPU.

The configuration is in typed sections, each a frozen dataclass that checks its own fields, all in one
module, :mod:`trainers.sections` (and re-exported here): ``game`` (:class:`spy_env.GameConfig`, itself in
sections: ``rules``, ``rewards``, ``penalties``, ``limits``, ``source``), ``model``, ``rollout`` (with its
vLLM engine's block, ``rollout.vllm``), ``decoding``, ``update``, ``loss``, ``advantages``, ``stages`` and
``run``. ``SpyRLConfig`` adds the rules that tie two sections together, each asking the registered
strategies what they support. Functions take the section they need; only the trainer's constructor and
the CLI hold the whole config.

Values can also come from a YAML file (``SpyRLConfig.from_yaml``: sections as mappings) and ``key=value``
overrides (``spyrl train --set loss.epsilon_high=0.28``). Every setting also has a flat name, unique in the
whole config (:mod:`spy_env.sections`): ``game.n_players`` is ``game.rules.n_players``, ``vllm_server_url``
``rollout.vllm.server_url``, and a trainer setting's flat name alone (``learning_rate=1e-5``) names its
section. Bad values raise ``ValueError`` naming ``section.field``. ``to_dict`` writes flat names (what run
configs record); ``to_yaml`` (``--print-config``) writes the sections, each setting after its help.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from agents.decoding import ANSWER_MODES
from spy_env.config import GameConfig
from spy_env.sections import build, coerce_floats, flat_fields, flat_name, flat_values, flatten
from trainers.choices import vote_gradient_of
from trainers.groups import grouping_of
from trainers.presets import PRESETS
from trainers.samples import PERFORM_REWARDS, perform_reward_of
from trainers.sections import (
    AdvantageConfig,
    DecodingConfig,
    LossConfig,
    ModelConfig,
    RolloutConfig,
    RunConfig,
    StageConfig,
    UpdateConfig,
)
from trainers.validation import bad, check_choice

__all__ = [
    "CHARS_PER_TOKEN",
    "SECTIONS",
    "AdvantageConfig",
    "DecodingConfig",
    "LossConfig",
    "ModelConfig",
    "RolloutConfig",
    "RunConfig",
    "SpyRLConfig",
    "StageConfig",
    "UpdateConfig",
]

CHARS_PER_TOKEN = 8  # above the characters of almost any BPE token of text (~4 on average)
CHAR_LIMITS = {"max_vote_chars": 4_000, "max_performance_chars": 8_000}  # GameConfig's defaults


SECTIONS: dict[str, type] = {
    "game": GameConfig,
    "model": ModelConfig,
    "rollout": RolloutConfig,
    "decoding": DecodingConfig,
    "update": UpdateConfig,
    "loss": LossConfig,
    "advantages": AdvantageConfig,
    "stages": StageConfig,
    "run": RunConfig,
}
# a setting's flat name alone names its trainer section (game settings are always written game.<name>)
_LEAVES = {leaf: name for name, cls in SECTIONS.items() if name != "game" for leaf in flat_fields(cls)}


@dataclass(frozen=True)
class SpyRLConfig:
    """Configuration of :class:`trainers.SpyRLTrainer`, in typed sections (docs/TRAINING.md)."""

    game: GameConfig = field(
        default_factory=GameConfig,
        metadata={"help": "The game (spy_env.GameConfig): rules, rewards, penalties, limits and source."},
    )
    model: ModelConfig = field(
        default_factory=ModelConfig, metadata={"help": "The trained model and which of its weights train."}
    )
    rollout: RolloutConfig = field(
        default_factory=RolloutConfig, metadata={"help": "An iteration's games, who plays them, on which engine."}
    )
    decoding: DecodingConfig = field(
        default_factory=DecodingConfig, metadata={"help": "How replies are sampled and shaped."}
    )
    update: UpdateConfig = field(default_factory=UpdateConfig, metadata={"help": "The optimizer and its mini-batches."})
    loss: LossConfig = field(default_factory=LossConfig, metadata={"help": "Eq. 7: clipping, KL and aggregation."})
    advantages: AdvantageConfig = field(
        default_factory=AdvantageConfig, metadata={"help": "Eq. 5 for votes, RAE for performances."}
    )
    stages: StageConfig = field(default_factory=StageConfig, metadata={"help": "Which stage trains when."})
    run: RunConfig = field(default_factory=RunConfig, metadata={"help": "Length, seed, outputs and reporting."})

    def __post_init__(self) -> None:
        for name, cls in SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise ValueError(
                    f"SpyRLConfig.{name} must be a {cls.__name__}, got {type(getattr(self, name)).__name__}"
                )
        object.__setattr__(self, "game", _budgeted(self.game, self.decoding.max_completion_tokens))
        self._check_across()
        self._check_seats()

    def _check_seats(self) -> None:
        """Fixed civilians leave the learner the spy's seat alone: only its performances can train."""
        rollout = self.rollout
        if rollout.civilians != "self" and (
            self.stages.stage_schedule != "perform" or rollout.performer != "self" or rollout.voter != "self"
        ):
            raise bad(
                rollout,
                "civilians",
                "'self' unless stages.stage_schedule is 'perform' and performer and voter are 'self' "
                "(fixed civilians leave the learner the spy's seat alone)",
            )

    def _check_across(self) -> None:
        """The rules that tie two sections together (each section checked its own fields already); each asks
        the registered strategies (the engine, the vote mode, the vote gradient, the performing reward) what
        they support."""
        decoding, rollout, advantages = self.decoding, self.rollout, self.advantages
        gradient = vote_gradient_of(advantages.vote_gradient)
        # votes whose choice distribution is recorded: an engine that records them (hf), or forward votes on the
        # trained model (vLLM rollouts do not record which tokens were allowed); a free vote has no choice step
        recorded_votes = decoding.vote.scores_choices and (rollout.engine.records_votes or rollout.forward_votes)
        if gradient.scores_choices and not recorded_votes:
            raise bad(
                advantages,
                "vote_gradient",
                "'sampled' unless decoding.vote_mode is constrained or think-then-vote with rollout.generation hf "
                "(or forward_votes)",
            )
        if gradient.exact_distribution and (decoding.temperature != 1 or decoding.top_p < 1):
            # the choice distributions q are recorded at temperature 1 over every legal seat: the votes must be
            # drawn from that q for Σ_k q_k ... to be their expectation and for q to be the behaviour policy
            raise bad(
                advantages, "vote_gradient", "'sampled' or 'supervised' unless decoding.temperature is 1 and top_p 1"
            )
        self._check_perform_reward(recorded_votes)
        if rollout.forward_votes and (not decoding.vote.one_forward_pass or decoding.top_p < 1):
            raise bad(rollout, "forward_votes", "False unless decoding.vote_mode is 'constrained' and top_p 1")
        self._check_vllm_decoding()
        needs_replays = grouping_of(advantages.detect_advantage_groups).needs_replayed_setups
        if needs_replays and (not rollout.replay_setup or rollout.games_per_document < 2):
            # without replayed setups every vote prompt is unique: one-member groups, every advantage 0
            raise bad(
                advantages,
                "detect_advantage_groups",
                "'game' unless rollout.replay_setup is on and games_per_document >= 2",
            )

    def _check_perform_reward(self, recorded_votes: bool) -> None:
        """What the performing reward needs of the votes (``recorded_votes``: each has a choice distribution
        the engine recorded) and of the advantages. Its name is checked here, not in its section: the
        registered rewards take :class:`AdvantageConfig`, so their registry sits above the sections."""
        decoding, advantages = self.decoding, self.advantages
        check_choice(advantages, "perform_reward", PERFORM_REWARDS)  # a registry: read when checked
        reward = perform_reward_of(advantages.perform_reward)
        if reward.needs_vote_distributions and (
            not recorded_votes or decoding.temperature != 1 or decoding.top_p < 1
        ):  # m̃ = Σ q needs the votes drawn from the recorded q (trainers/perform_rewards.py)
            raise bad(
                advantages,
                "perform_reward",
                "'sampled' unless votes are constrained or think-then-vote, rollout.generation hf (or forward_votes), "
                "temperature 1, top_p 1",
            )
        if reward.continuous and advantages.perform_group_norm:
            # (r − b_role)/(std_g + ε) is only centred by b_role: continuous rewards whose replays differ by a
            # hair divide a large r − b by a tiny std (a gradient norm of 3,424 measured in one such run)
            raise bad(advantages, "perform_reward", "'sampled' when perform_group_norm is on")

    def _check_vllm_decoding(self) -> None:
        """Through TRL's ``generate`` (a server, a tensor-parallel group, sleep mode) a vLLM call has one
        pattern and one temperature: no boxed ending, no temperature of the performances' own."""
        decoding, rollout = self.decoding, self.rollout
        if rollout.decodes_each_request:
            return
        where = f"rollout.generation={rollout.generation!r} unless vllm-colocate on one device without sleep mode"
        if decoding.ending.forces_answer:
            unforced = " or ".join(repr(name) for name, mode in ANSWER_MODES.items() if not mode.forces_answer)
            raise bad(decoding, "answer", f"{unforced} with {where}")
        if decoding.perform_temperature is not None:
            raise bad(decoding, "perform_temperature", f"None with {where}")

    # ------------------------------------------------------------- building
    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> SpyRLConfig:
        """Build from sections as mappings (``{"loss": {"epsilon": 0.2}}``), dotted keys (``"loss.epsilon"``,
        ``"rollout.vllm.server_url"``) or flat names alone (``"epsilon"``, ``"vllm_server_url"``); a section's
        own sections may be mappings too (``{"game": {"rules": {"n_players": 4}}}``). An unknown key, or a
        setting given twice, is refused by name."""
        sections = {}
        for name, given in _nested(values).items():
            section = SECTIONS[name]
            sections[name] = build(section, coerce_floats(section, given), _where(name))
        return cls(**sections)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> SpyRLConfig:
        """A preset (:mod:`trainers.presets`) with ``overrides`` in any form :meth:`from_dict` reads."""
        if not isinstance(name, str) or name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
        values = _nested(json.loads(json.dumps(PRESETS[name])))
        for section, given in _nested(overrides).items():
            values[section] = {**values.get(section, {}), **given}
        return cls.from_dict(values)

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> SpyRLConfig:
        import yaml

        from spy_env.io import parse_yaml

        path = Path(path)
        if not path.is_file():
            raise ValueError(
                f"config file {str(path)!r} does not exist" if not path.exists() else f"{path} is not a file"
            )
        try:
            values = parse_yaml(path.read_text(encoding="utf-8"), f"config file {path}") or {}
        except UnicodeDecodeError as e:
            raise ValueError(f"config file {path} is not UTF-8 text") from e
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
            raise ValueError(f"config file {path} is not valid YAML{at}: {getattr(e, 'problem', None) or e}") from e
        if not isinstance(values, dict):
            raise ValueError(f"config file {path} must hold a mapping of field: value, got {type(values).__name__}")
        preset = values.pop("preset", None)
        merged = _nested(values)
        for section, given in _nested(overrides).items():
            merged[section] = {**merged.get(section, {}), **given}
        return cls.preset(preset, **merged) if preset else cls.from_dict(merged)

    def with_overrides(self, assignments: list[str]) -> SpyRLConfig:
        """Apply ``key=value`` strings (values parsed as YAML; keys as :meth:`from_dict` reads them)."""
        import yaml

        from spy_env.io import parse_yaml

        values = self._values()
        for item in assignments:
            key, sep, raw = item.partition("=")
            if not sep:
                raise ValueError(f"override {item!r} must look like key=value")
            try:
                value = parse_yaml(raw, f"override {key}")
            except yaml.YAMLError as e:
                raise ValueError(f"override {item!r}: the value is not valid YAML ({getattr(e, 'problem', e)})") from e
            section, name = _place(key)
            if name is None:
                raise ValueError(f"override {item!r}: set a field of {section!r} ({section}.<field>=value)")
            name = flat_name(SECTIONS[section], name)
            if (
                _is_str_field(SECTIONS[section], name)
                and isinstance(value, list)
                and all(isinstance(v, str) for v in value)
            ):
                value = raw  # a str field keeps its text: game.mask_placeholder=[…] is not a YAML list
            values[section] = {**values[section], name: value}
        return SpyRLConfig.from_dict(values)

    # ----------------------------------------------------------- reading out
    def to_dict(self) -> dict[str, Any]:
        """Every section as a mapping of its settings by flat name (JSON-ready; the form run configs record,
        ``game`` as :meth:`spy_env.GameConfig.to_dict` writes it; :meth:`from_dict` reads it back)."""
        out = self._values()
        out["game"] = self.game.to_dict()
        return out

    def to_yaml(self) -> str:
        """Every section and field with its help as a comment; ``from_yaml`` reads it back to an equal config."""
        import yaml

        values = self.to_dict()
        lines = []
        for f in fields(self):
            lines.append(f"# {f.metadata['help']}")
            lines.append(f"{f.name}:")
            lines.extend(_yaml_lines(getattr(self, f.name), values[f.name], "  ", "", yaml.safe_dump))
        return "\n".join(lines) + "\n"

    def _values(self) -> dict[str, dict[str, Any]]:
        """Each section's settings by flat name, as given (a character limit that only follows the token
        budget is left out of ``game``, so that it follows a new budget too)."""
        out = {name: flat_values(getattr(self, name)) for name in SECTIONS}
        budget = CHARS_PER_TOKEN * self.decoding.max_completion_tokens
        for key, default in CHAR_LIMITS.items():
            if out["game"][key] == max(default, budget):
                del out["game"][key]
        return out


def _budgeted(game: GameConfig, max_completion_tokens: int) -> GameConfig:
    """``game`` with each character limit left at its default raised to the token budget
    (``CHARS_PER_TOKEN`` per token): a reply the model may write is not cut. A limit set to any other
    value stays as set."""
    budget = CHARS_PER_TOKEN * max_completion_tokens
    raised = {k: max(v, budget) for k, v in CHAR_LIMITS.items() if getattr(game.limits, k) == v}
    return replace(game, **raised) if any(getattr(game.limits, k) != v for k, v in raised.items()) else game


def _place(key: str) -> tuple[str, str | None]:
    """``(section, field)`` of a key: ``section.field``, a field name alone, or a section (field None)."""
    if key in SECTIONS:
        return key, None
    section, dot, name = key.partition(".")
    if dot:
        if section not in SECTIONS:
            raise ValueError(f"SpyRLConfig: unknown section {section!r} in {key!r}; sections: {list(SECTIONS)}")
        return section, name
    if key not in _LEAVES:
        raise ValueError(f"SpyRLConfig: unknown fields [{key!r}]")
    return _LEAVES[key], key


def _nested(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``values`` (any mix of the three key forms) as ``{section: {field: value}}``."""
    if not isinstance(values, Mapping):
        raise ValueError(f"SpyRLConfig: expected a mapping of fields, got {type(values).__name__}")
    if unknown := sorted(
        k
        for k in values
        if not isinstance(k, str) or (k not in SECTIONS and k.partition(".")[0] not in SECTIONS and k not in _LEAVES)
    ):
        raise ValueError(f"SpyRLConfig: unknown fields {unknown}")
    out: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        section, name = _place(key)
        if name is None and not isinstance(value, Mapping):
            raise ValueError(f"SpyRLConfig.{section} must be a mapping of its fields, got {value!r}")
        given = flatten(SECTIONS[section], value if name is None else {name: value}, _where(section))
        out[section] = {**out.get(section, {}), **given}
    return out


def _where(section: str) -> str:
    """How errors name a section: the game by its own class (its settings are ``GameConfig.<section>.<name>``)."""
    return "GameConfig" if section == "game" else f"SpyRLConfig.{section}"


def _yaml_lines(section: Any, values: Mapping[str, Any], indent: str, prefix: str, dump: Any) -> list[str]:
    """``section``'s fields, each after its help as a comment, a section it holds as a block of its own
    (``values``: the settings by flat name; ``prefix``: that of the flat names of ``section``'s fields)."""
    lines = []
    for f in fields(section):
        lines.append(f"{indent}# {f.metadata.get('help', '')}".rstrip())
        if "section" in f.metadata:
            lines.append(f"{indent}{f.name}:")
            held = getattr(section, f.name)
            lines.extend(_yaml_lines(held, values, indent + "  ", prefix + f.metadata["prefix"], dump))
            continue
        dumped = dump({f.name: values[prefix + f.name]}, sort_keys=False, allow_unicode=True).rstrip()
        lines.extend(indent + line for line in dumped.splitlines())
    return lines


def _is_str_field(cls: type, name: str) -> bool:
    held = flat_fields(cls).get(name)
    return held is not None and held[1].type in ("str", str)
