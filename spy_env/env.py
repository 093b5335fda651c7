"""# Who Is the Spy? (``spy_env/WhoIsTheSpy-v0``)

| Import             | ``import spy_env; env = spy_env.make()``             |
|--------------------|------------------------------------------------------|
| Actions            | Text (any string is legal)                           |
| Parallel API       | Yes (native: one parallel step per stage)            |
| Agents             | ``player_0 .. player_{n-1}`` (prompts: Player 1..n)  |
| Observation        | Dict of prompt text and structured fields            |

A multi-agent self-play game that turns an unverifiable task into a verifiable one (RLSVR).
Every player performs the same task on a source document (default: design a math problem
grounded in it and solve it, answer in ``\\boxed{}``); one player, the spy, got a degraded
copy. Then everyone reads all performances and votes for the suspected spy. The environment
knows the spy's seat, so votes give rewards with no judge, no labels and no reward model.

## Roles and stages

At ``reset`` a document is drawn from the corpus, the spy seat uniformly, and the spy's copy is
made by the degradation operator (``mask_spans`` by default). Each round has a *performing*
stage then a *detection* stage; every alive player acts once per stage (AEC: in seat order;
parallel: all at once). With ``rounds > 1`` the plurality is eliminated (ties: nobody); the
game ends when the spy is eliminated, two players remain, or the rounds run out.

## Observation

``Dict`` with ``system`` and ``prompt`` (the chat messages for an LLM), ``copy`` (the player's
own copy of the document), ``performances`` (this round's performances as shown, ``""`` until
the detection stage and for eliminated players), ``stage`` (0 perform, 1 vote), ``round``,
``seat``, ``vote_targets`` (legal targets, 0/1 per seat) and ``alive``.

## Action

The raw completion string. Junk (no vote tag, no boxed answer, 1 MB of noise) is recorded in
``info["violations"]`` with a penalty, never an exception. ``<think>`` blocks are stripped
before other players see a performance.

## Rewards

Given when a round resolves, as the weighted sum of three components that ``info`` also
carries separately (``info["reward_components"]``): detection ``1[vote = spy]``; zero-sum
performing rewards ``-β(m_u - m̄_c)`` for the spy and ``(β/n_c)(m_u - m̄_c) - λ(m_cj - m̄_c)``
for civilians; format penalties. At the end ``info["truth"]`` reveals the spy seat, all votes
and the degraded spans.

## Arguments

``spy_env.make(**fields)`` or ``spy_env.make(config=GameConfig(...))``, plus ``render_mode``
(``"ansi"`` returns the transcript, ``"human"`` prints it in colour). See :class:`GameConfig`.

``reset(seed=..., options=...)``: ``options`` may fix ``document_index`` or ``document_id``,
``spy_seat`` and ``degrade_seed`` (games sharing all three are identical setups); any other key
(but ``options``, the probe of PettingZoo's API checkers), or a value of the wrong type, is a
``ValueError`` naming it.

## Version History

* v0: initial release.
"""

from __future__ import annotations

import copy
import functools
import logging
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import EzPickle, seeding
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import wrappers

from spy_env.config import GameConfig
from spy_env.corpus import Document, game_documents
from spy_env.degrade import DEGRADERS, DegradeContext, bag_of_words, most_similar, needs_neighbors
from spy_env.game import Game, RoundResult, Stage
from spy_env.parsing import TEXT_CHARSET, Shingles, shingles
from spy_env.prompts import defuse_tags, format_performances
from spy_env.tasks import TASKS
from spy_env.transcript import transcript

logger = logging.getLogger(__name__)

__all__ = ["GameHost", "env", "make", "parallel_env", "raw_env"]

_RENDER_MODES = ("ansi", "human")
_OPTION_KEYS = ("document_index", "document_id", "spy_seat", "degrade_seed")
# PettingZoo's api_test and parallel_api_test check that reset takes ``options`` with
# ``reset(seed=0, options={"options": 1})``: a key named like the argument itself is that probe,
# not a typo of an option, and is ignored so that the env passes PettingZoo's own checkers.
_SIGNATURE_PROBE = "options"


def _checked_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``reset``'s ``options`` as a dict; a key it does not know (a typo would otherwise be a game
    the caller did not ask for) or a value of the wrong type is a ``ValueError`` naming the key.

    >>> _checked_options({"evil": 1})
    Traceback (most recent call last):
    ...
    ValueError: reset options: unknown key 'evil'; accepted: document_index, document_id, spy_seat, degrade_seed
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ValueError(f"reset options must be a mapping, got {type(options).__name__}")
    options = {key: value for key, value in options.items() if key != _SIGNATURE_PROBE}
    unknown = [repr(key) for key in options if key not in _OPTION_KEYS]
    if unknown:
        keys = "key" if len(unknown) == 1 else "keys"
        raise ValueError(f"reset options: unknown {keys} {', '.join(unknown)}; accepted: {', '.join(_OPTION_KEYS)}")
    for key, value in options.items():
        if key == "document_id":
            if not isinstance(value, str):
                raise ValueError(f"options['document_id'] must be a string, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"options[{key!r}] must be an integer, got {value!r}")
    if not 0 <= options.get("degrade_seed", 0) < 2**63:
        raise ValueError(f"options['degrade_seed'] must be in 0..{2**63 - 1}, got {options['degrade_seed']}")
    return options


class _Text(spaces.Text):
    """``spaces.Text`` whose repr names its charset's size instead of printing its ~63k characters."""

    def __repr__(self) -> str:
        return f"Text({self.min_length}, {self.max_length}, charset=<{len(self.character_set)} characters>)"


@functools.lru_cache(maxsize=32)
def _text_prototype(max_length: int) -> spaces.Text:
    return _Text(max_length, min_length=0, charset=TEXT_CHARSET)


def _text_space(max_length: int) -> spaces.Text:
    """A ``Text`` space over the wide charset with its own RNG.

    Building one costs ~40 ms (a 63k-character charset); copies share the read-only charset
    tables of a cached prototype, so every agent of every env still seeds independently.
    """
    space = copy.copy(_text_prototype(max_length))
    space._np_random = None
    return space


class _NeighborTable:
    def __init__(self, documents: tuple[Document, ...]) -> None:
        self.bags = [bag_of_words(doc.text) for doc in documents]
        self.neighbors: dict[int, int] = {}


@functools.lru_cache(maxsize=8)
def _neighbor_table(documents: tuple[Document, ...]) -> _NeighborTable:
    """Word bags and nearest neighbours of a corpus, shared by every env over an equal corpus."""
    return _NeighborTable(documents)


def _config_from(config: GameConfig | None, overrides: Mapping[str, Any]) -> GameConfig:
    if config is None:
        return GameConfig.from_dict(overrides)
    if not isinstance(config, GameConfig):
        raise ValueError(f"config must be a GameConfig, got {type(config).__name__}")
    return replace(config, **overrides) if overrides else config


@dataclass(frozen=True)
class _Scene:
    """What every seat's observation of one stage shares: made once a stage, not once a seat."""

    key: tuple[int, Stage]  # (round, stage) of the game it shows
    template: str
    fields: dict[str, Any]  # the template's fields but the seat's own
    shown: tuple[str | None, ...]  # the performances as shown (None: none, or an eliminated seat)
    performances: tuple[str, ...]
    system: str
    stage_index: int
    alive: np.ndarray  # (n_players,) int8; each observation gets a copy


class GameHost:
    """Hosts one :class:`~spy_env.game.Game` at a time: it holds the corpus and the RNG, deals each
    new game (document, spy seat, the spy's degraded copy), hands the seats' actions to the game,
    and shows each seat its observation and infos. The rules are the game's; the AEC and parallel
    classes and the batched runner all play through a host.
    """

    def __init__(self, config: GameConfig) -> None:
        self.config = config
        self.task = TASKS[config.rules.task]
        self.templates = self.task.templates(config.rules.prompts)
        # a vote template that never names the field is not given it (defusing it costs a scan)
        self._shows_own_performance = "own_performance" in self.templates["vote"]
        self.documents = game_documents(config)
        if needs_neighbors(config.rules.resolved_degrade) and len(self.documents) < 2:
            raise ValueError(
                f"GameConfig.source.corpus must hold at least 2 documents for degrade={config.rules.resolved_degrade!r}"
            )
        self._index_of_id = {doc.id: i for i, doc in enumerate(self.documents)}
        self._shingles: dict[int, Shingles] = {}
        self.possible_agents = [f"player_{i}" for i in range(config.rules.n_players)]
        self.seat_of = {agent: i for i, agent in enumerate(self.possible_agents)}
        self.np_random, self.np_random_seed = seeding.np_random(None)
        self.game: Game | None = None
        self.reset_options: dict[str, Any] = {}
        self._obs_cache: dict[int, dict[str, Any]] = {}
        self._obs_key: tuple[int, Stage] | None = None
        self._scene: _Scene | None = None
        self._system: str | None = None  # the system turn, the same for every seat of every game
        self._observation_spaces: dict[str, spaces.Space] = {}
        self._action_spaces: dict[str, spaces.Space] = {}
        self.stages_played = 0  # stages resolved in the current game: PettingZoo's cycles
        n = config.rules.n_players
        self.state_space = spaces.MultiDiscrete([len(Stage), config.rules.rounds, n] + [2] * n)

    # ---------------------------------------------------------------- spaces
    @functools.cached_property
    def max_prompt_chars(self) -> int:
        cfg = self.config
        return cfg.limits.max_document_chars + cfg.rules.n_players * (cfg.limits.max_performance_chars + 64) + 16_384

    def observation_space(self, agent: str) -> spaces.Space:
        # Built lazily: runners never ask for spaces.
        if agent not in self._observation_spaces:
            cfg, n = self.config, self.config.rules.n_players
            self._observation_spaces[agent] = spaces.Dict(
                {
                    "system": _text_space(8_192),
                    "prompt": _text_space(self.max_prompt_chars),
                    "copy": _text_space(cfg.limits.max_document_chars),
                    "performances": spaces.Tuple([_text_space(cfg.limits.max_performance_chars) for _ in range(n)]),
                    "stage": spaces.Discrete(2),
                    "round": spaces.Discrete(cfg.rules.rounds),
                    "seat": spaces.Discrete(n),
                    "vote_targets": spaces.MultiBinary(n),
                    "alive": spaces.MultiBinary(n),
                }
            )
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        if agent not in self._action_spaces:
            limit = max(self.config.limits.max_performance_chars, self.config.limits.max_vote_chars)
            self._action_spaces[agent] = _text_space(limit)
        return self._action_spaces[agent]

    # ----------------------------------------------------------------- setup
    def new_game(self, seed: int | None, options: Mapping[str, Any] | None) -> Game:
        if seed is not None:
            self.np_random, self.np_random_seed = seeding.np_random(seed)
        options = _checked_options(options)
        cfg, rng = self.config, self.np_random
        # Always draw the same numbers in the same order, so options never shift the stream.
        drawn_index = int(rng.integers(len(self.documents)))
        drawn_spy = int(rng.integers(cfg.rules.n_players))
        drawn_degrade_seed = int(rng.integers(2**63 - 1))
        index = self._document_index(options, drawn_index)
        spy_seat = int(options.get("spy_seat", drawn_spy))
        if not 0 <= spy_seat < cfg.rules.n_players:
            raise ValueError(f"options['spy_seat'] must be in 0..{cfg.rules.n_players - 1}, got {spy_seat}")
        degrade_seed = int(options.get("degrade_seed", drawn_degrade_seed))
        document = self.documents[index]
        context = DegradeContext(
            ratio=cfg.rules.resolved_ratio,
            placeholder=cfg.rules.mask_placeholder,
            relevant_first=cfg.rules.relevant_spans_first,
            neighbor=lambda: self.documents[self._neighbor(index)].text,
        )
        degraded = DEGRADERS[cfg.rules.resolved_degrade](document.text, np.random.default_rng(degrade_seed), context)
        if index not in self._shingles:
            self._shingles[index] = shingles(document.text, cfg.penalties.copy_min_words)
        self.game = Game(cfg, self.task, document, spy_seat, degraded, self._shingles[index])
        self.stages_played = 0
        # What reset(seed=..., options=...) needs to re-create this game exactly (buffer rows carry it).
        self.reset_options = {"document_id": document.id, "spy_seat": spy_seat, "degrade_seed": degrade_seed}
        self._obs_cache = {}
        self._obs_key = None
        self._scene = None
        return self.game

    def _document_index(self, options: Mapping[str, Any], drawn: int) -> int:
        if "document_id" in options:
            doc_id = options["document_id"]
            if doc_id not in self._index_of_id:
                raise ValueError(f"options['document_id'] {doc_id!r} is not in the corpus")
            return self._index_of_id[doc_id]
        index = int(options.get("document_index", drawn))
        if not 0 <= index < len(self.documents):
            raise ValueError(f"options['document_index'] must be in 0..{len(self.documents) - 1}, got {index}")
        return index

    def _neighbor(self, index: int) -> int:
        table = _neighbor_table(self.documents)
        if index not in table.neighbors:
            table.neighbors[index] = most_similar(index, table.bags)
        return table.neighbors[index]

    # ----------------------------------------------------------- observation
    def observe(self, seat: int) -> dict[str, Any]:
        """The observation of ``seat`` (cached per stage; do not mutate it)."""
        game = self.game
        assert game is not None, "reset() before observe()"
        key = (game.round, game.stage)
        if game.stage is not Stage.DONE and key != self._obs_key:
            self._obs_cache, self._obs_key = {}, key
        obs = self._obs_cache.get(seat)
        if obs is None:
            obs = self._obs_cache[seat] = self._render(seat)
        return obs

    def _render(self, seat: int) -> dict[str, Any]:
        game = self.game
        assert game is not None
        scene = self._scene_of(game)
        fields = {**scene.fields, "player": seat + 1, "document": game.views[seat]}
        targets = np.zeros(self.config.rules.n_players, dtype=np.int8)
        if game.stage is Stage.VOTE:
            legal = game.legal_targets(seat)
            targets[legal] = 1
            if self._shows_own_performance:
                fields["own_performance"] = defuse_tags(scene.shown[seat] or "")
            fields["legal_votes"] = ", ".join([str(s + 1) for s in legal])
        prompt = scene.template.format_map(fields)
        return {
            "system": scene.system,
            "prompt": prompt[: self.max_prompt_chars],
            "copy": game.views[seat],
            "performances": scene.performances,
            "stage": scene.stage_index,
            "round": game.round,
            "seat": seat,
            "vote_targets": targets,
            "alive": scene.alive.copy(),
        }

    def _scene_of(self, game: Game) -> _Scene:
        """What every seat sees alike in the current stage: made at a stage's first observation."""
        key = (game.round, game.stage)
        if self._scene is not None and self._scene.key == key:
            return self._scene
        stage = game.stage
        fields = {
            "n_players": self.config.rules.n_players,
            "round": game.round + 1,
            "task": self.task.instruction,
            "history": game.history_text(),
        }
        shown: tuple[str | None, ...] = (None,) * self.config.rules.n_players
        if stage is Stage.VOTE:
            shown = tuple(game.shown_performances())
            fields["performances"] = format_performances(shown)
        self._scene = _Scene(
            key=key,
            template=self.templates[stage.value],
            fields=fields,
            shown=shown,
            performances=tuple(p or "" for p in shown),
            system=self._system_turn(),
            stage_index=stage.index,
            alive=np.asarray(game.alive, dtype=np.int8),
        )
        return self._scene

    def _system_turn(self) -> str:
        if self._system is None:
            text = self.templates["system"].format(n_players=self.config.rules.n_players, task=self.task.instruction)
            self._system = text[:8_192]
        return self._system

    def step_seat(self, seat: int, action: Any) -> RoundResult | None:
        game = self.game
        assert game is not None
        before = (game.round, game.stage)
        result = game.act(seat, action)
        self.stages_played += (game.round, game.stage) != before
        return result

    def state(self) -> np.ndarray:
        """The game's hidden facts as integers (``state_space``): stage (0 perform, 1 vote, 2 done),
        round, the spy's seat, then each seat's alive flag."""
        game = self.game
        if game is None:
            raise RuntimeError("state() before reset()")
        stage = list(Stage).index(game.stage)
        round_ = min(game.round, self.config.rules.rounds - 1)
        return np.asarray([stage, round_, game.spy_seat, *map(int, game.alive)], dtype=np.int64)

    def play_stage(self, actions: Mapping[int, Any]) -> RoundResult | None:
        """Hand every pending seat's action (``actions[seat]``) to the game, in seat order; the
        round's result when this stage resolved it, else None."""
        game = self.game
        assert game is not None
        result = None
        for seat in game.pending():
            result = game.act(seat, actions[seat])
        self.stages_played += 1
        return result

    def info(self, seat: int, stage: Stage, result: RoundResult | None) -> dict[str, Any]:
        """What ``seat`` learns after acting in ``stage``: its action's info, and the round's when it resolved."""
        info = {**self.base_info(seat), **self.action_info(seat, stage)}
        if result is not None:
            info.update(self.round_info(result, seat))
        return info

    def action_info(self, seat: int, stage: Stage) -> dict[str, Any]:
        """Info about ``seat``'s latest action in ``stage``: violations and penalty."""
        game = self.game
        assert game is not None
        record = (game.current.performances if stage is Stage.PERFORM else game.current.votes).get(seat)
        if record is None:  # the round just resolved and a new one began
            log = game.log[-2]
            record = log.performances[seat] if stage is Stage.PERFORM else log.votes[seat]
        info: dict[str, Any] = {"violations": list(record.violations), "penalty": record.penalty}
        if stage is Stage.VOTE:
            info["vote"] = record.target
        return info

    def round_info(self, result: RoundResult, seat: int) -> dict[str, Any]:
        game = self.game
        assert game is not None
        info: dict[str, Any] = {
            "reward_components": game.components(result, seat),
            "votes_received": result.votes_received[seat],
            "vote": result.votes[seat],
            "eliminated": result.eliminated,
        }
        if game.done:
            info["truth"] = game.truth()
        return info

    def base_info(self, seat: int) -> dict[str, Any]:
        game = self.game
        assert game is not None
        return {"stage": game.stage.value, "round": game.round, "seat": seat}

    def render(self, render_mode: str | None) -> str | None:
        if render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; pass render_mode='ansi' or 'human'")
            return None
        if self.game is None:
            return None
        text = transcript(self.game)
        if render_mode == "ansi":
            return text.plain
        from rich.console import Console

        Console().print(text)
        return None


class _SpyEnvBase:
    """The PettingZoo surface the AEC and parallel classes share: config, agent names, spaces and
    rendering, all delegated to a :class:`GameHost`."""

    metadata = {
        "name": "WhoIsTheSpy-v0",
        "render_modes": list(_RENDER_MODES),
        "is_parallelizable": True,
    }

    def _setup(self, config: GameConfig | None, render_mode: str | None, overrides: dict[str, Any]) -> None:
        if render_mode is not None and render_mode not in _RENDER_MODES:
            raise ValueError(f"render_mode must be None or one of {_RENDER_MODES}, got {render_mode!r}")
        overrides = dict(overrides)
        max_cycles = overrides.pop("max_cycles", None)
        if max_cycles is not None and (
            isinstance(max_cycles, bool) or not isinstance(max_cycles, int) or max_cycles < 1
        ):
            raise ValueError(f"max_cycles must be None or an integer >= 1, got {max_cycles!r}")
        self.max_cycles: int | None = max_cycles
        self.config = _config_from(config, overrides)
        self.render_mode = render_mode
        self._core = GameHost(self.config)
        self.possible_agents = list(self._core.possible_agents)
        self.seat_of = self._core.seat_of
        self.agents: list[str] = []

    @property
    def game(self) -> Game | None:
        """The underlying rules object (for inspection; step through the env)."""
        return self._core.game

    @property
    def reset_options(self) -> dict[str, Any]:
        """The full options of the current game: ``reset(seed=s, options=env.reset_options)`` replays it."""
        return dict(self._core.reset_options)

    def observation_space(self, agent: str) -> spaces.Space:
        return self._core.observation_space(agent)

    def action_space(self, agent: str) -> spaces.Space:
        return self._core.action_space(agent)

    @property
    def state_space(self) -> spaces.MultiDiscrete:
        """Space of :meth:`state`: stage, round, spy seat, then an alive flag per seat."""
        return self._core.state_space

    def state(self) -> np.ndarray:
        """The global state (what no seat sees whole): stage (0 perform, 1 vote, 2 done), round,
        the spy's seat, each seat's alive flag."""
        return self._core.state()

    def _cut_off(self) -> bool:
        """``max_cycles`` stages have resolved and the game goes on: the live seats are truncated."""
        game = self._core.game
        return self.max_cycles is not None and self._core.stages_played >= self.max_cycles and not game.done

    def render(self) -> str | None:
        return self._core.render(self.render_mode)

    def close(self) -> None:
        pass


class raw_env(_SpyEnvBase, AECEnv, EzPickle):
    """AEC Who-Is-the-Spy environment (see the module docstring)."""

    def __init__(self, config: GameConfig | None = None, render_mode: str | None = None, **overrides: Any):
        EzPickle.__init__(self, config, render_mode, **overrides)
        AECEnv.__init__(self)
        self._setup(config, render_mode, overrides)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        game = self._core.new_game(seed, options)
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: self._core.base_info(self._core.seat_of[a]) for a in self.agents}
        self.agent_selection = self.possible_agents[game.pending()[0]]

    def observe(self, agent: str) -> dict[str, Any]:
        return self._core.observe(self._core.seat_of[agent])

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        game = self._core.game
        assert game is not None
        seat, stage = self._core.seat_of[agent], game.stage
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        result = self._core.step_seat(seat, action)
        self.infos[agent] = {**self._core.base_info(seat), **self._core.action_info(seat, stage)}
        if result is not None:
            for other in self.agents:
                s = self._core.seat_of[other]
                if not result.alive[s]:
                    continue
                self.rewards[other] = game.reward(result, s)
                self.infos[other] = {
                    **self.infos[other],
                    **self._core.base_info(s),
                    **self._core.round_info(result, s),
                }
                if game.done or not game.alive[s]:
                    self.terminations[other] = True
        if self._cut_off():
            for other in self.agents:
                self.truncations[other] = not self.terminations[other]
        pending = game.pending()
        if pending:
            self.agent_selection = self.possible_agents[pending[0]]
        self._accumulate_rewards()
        self._deads_step_first()
        if self.render_mode == "human" and game.done:
            self.render()


class parallel_env(_SpyEnvBase, ParallelEnv, EzPickle):
    """Native parallel Who-Is-the-Spy environment: one ``step`` per stage (batched generation)."""

    def __init__(self, config: GameConfig | None = None, render_mode: str | None = None, **overrides: Any):
        EzPickle.__init__(self, config, render_mode, **overrides)
        self._setup(config, render_mode, overrides)

    def reset(self, seed: int | None = None, options: dict | None = None):
        self._core.new_game(seed, options)
        self.agents = list(self.possible_agents)
        core = self._core
        observations = {a: core.observe(core.seat_of[a]) for a in self.agents}
        infos = {a: core.base_info(core.seat_of[a]) for a in self.agents}
        return observations, infos

    def step(self, actions: Mapping[str, Any]):
        core, game = self._core, self._core.game
        if game is None or game.done or not self.agents:
            raise RuntimeError("step() called on a finished game; call reset() first")
        stage = game.stage
        expected = {self.possible_agents[s] for s in game.pending()}
        missing, extra = expected - set(actions), set(actions) - expected
        if missing or extra:
            raise ValueError(
                f"step() needs one action per live agent: missing {sorted(missing)}, unexpected {sorted(extra)}"
            )
        result = core.play_stage({seat: actions[self.possible_agents[seat]] for seat in game.pending()})
        live = list(self.agents)
        rewards = dict.fromkeys(live, 0.0)
        terminations = dict.fromkeys(live, False)
        truncations = dict.fromkeys(live, False)
        infos = {}
        for agent in live:
            seat = core.seat_of[agent]
            infos[agent] = core.info(seat, stage, result)
            if result is not None:
                rewards[agent] = game.reward(result, seat)
                terminations[agent] = game.done or not game.alive[seat]
        if self._cut_off():
            truncations = {a: not terminations[a] for a in live}
        observations = {a: core.observe(core.seat_of[a]) for a in live}
        self.agents = [a for a in live if not (terminations[a] or truncations[a])]
        if self.render_mode == "human" and game.done:
            self.render()
        return observations, rewards, terminations, truncations, infos


class _OrderEnforcing(wrappers.OrderEnforcingWrapper):
    """PettingZoo's ``OrderEnforcingWrapper`` with what every AEC step reads defined on it.

    The base wrapper forwards each attribute it lacks through two ``__getattr__`` calls; ``agent_iter``,
    ``last`` and ``step`` read ``agents``, ``agent_selection`` and the per-agent dicts a dozen times a
    step, a quarter of a scripted game's time. Here those two are properties and ``last`` is the env's
    own, after the same check: before ``reset`` each raises the base wrapper's error.
    """

    @property
    def agents(self) -> list[str]:
        return self.env.agents if self._has_reset else self.__getattr__("agents")

    @property
    def agent_selection(self) -> str:
        return self.env.agent_selection if self._has_reset else self.__getattr__("agent_selection")

    def last(self, observe: bool = True) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if not self._has_reset:
            return super().last(observe)  # raises as the base wrapper does
        return self.env.last(observe)

    def __str__(self) -> str:
        return str(self.env)


def env(config: GameConfig | None = None, render_mode: str | None = None, **overrides: Any) -> AECEnv:
    """The AEC environment with PettingZoo's standard wrapper (order enforcing)."""
    return _OrderEnforcing(raw_env(config, render_mode=render_mode, **overrides))


def make(config: GameConfig | None = None, *, render_mode: str | None = None, **overrides: Any) -> AECEnv:
    """``spy_env.make(n_players=5, degrade="mask_spans", ...)``: a ready-to-use AEC environment.

    Keyword arguments are :class:`GameConfig` fields; unknown ones raise ``ValueError``.
    """
    return env(config, render_mode=render_mode, **overrides)
