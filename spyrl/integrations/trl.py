"""spyrl for TRL's ``GRPOTrainer``: single-seat tasks as ``datasets.Dataset`` s and TRL reward functions.

>>> from spyrl.integrations.trl import detection_dataset, detection_reward  # doctest: +SKIP
>>> trainer = GRPOTrainer(model, reward_funcs=detection_reward, train_dataset=detection_dataset())  # doctest: +SKIP

* :func:`detection_dataset` + :data:`detection_reward`: a civilian's vote prompt from real games whose
  seats were played by ``performers`` (default: heuristic); reward ``1[vote = spy]`` plus the vote's
  format penalties, computed by the environment itself.
  With ``prefill_vote=True`` the prompt ends with ``<vote>`` already written and the reward scores
  ``<vote>`` + completion.
* :func:`spy_dataset` + :class:`GameReward`: the performing prompt of the spy (``role="spy"``) or of a
  civilian; the reward replays the game with the model's text in that seat against ``detectors``
  (default: heuristic, seeded per game) and returns the seat's performing reward.
* :func:`selfplay_dataset` + :class:`SelfPlayRollout` + :func:`selfplay_reward` (+ the metrics
  :func:`selfplay_caught` and :func:`selfplay_rule_baselines`): live self-play, TRL's
  ``rollout_func``: the model being trained plays every seat of real games (see
  :mod:`spyrl.integrations.trl_selfplay`).
* :class:`SpyEnvironment`: an ``environment_factory`` class for TRL's multi-turn tool path (tools
  ``perform`` and ``vote``, reward from ``get_reward``).

Every dataset row carries its game's reset options (``game_seed``, ``document_id``, ``spy_seat``,
``degrade_seed``), so any prompt can be re-created with ``spy_env``. The prompt column is TRL's
conversational format. The config given to a dataset and to its reward must be the same.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from spy_env.config import GameConfig
from spy_env.stage import Stage
from spyrl.integrations._games import (
    DetectorSpec,
    check_rows,
    completion_text,
    detector_factory,
    game_rows,
    replay_rewards,
)

if sys.version_info < (3, 11):  # pragma: no cover - TRL >= 1.16 itself needs 3.11
    raise ImportError("spyrl.integrations.trl needs Python >= 3.11 (TRL >= 1.16 does); pip install 'spyrl[trl]'")

from spyrl.integrations.trl_selfplay import (
    SelfPlayRollout,
    selfplay_caught,
    selfplay_dataset,
    selfplay_reward,
    selfplay_rule_baselines,
)

__all__ = [
    "VOTE_PREFILL",
    "DetectionReward",
    "GameReward",
    "SelfPlayRollout",
    "SpyEnvironment",
    "detection_dataset",
    "detection_reward",
    "selfplay_caught",
    "selfplay_dataset",
    "selfplay_reward",
    "selfplay_rule_baselines",
    "spy_dataset",
]


def _dataset(rows: list[dict[str, Any]]):
    from datasets import Dataset

    return Dataset.from_list(rows)


def detection_dataset(
    config: GameConfig | None = None,
    *,
    num_games: int = 64,
    seed: int = 0,
    performers: str | Sequence[str] = "heuristic",
    roles: Sequence[str] = ("civilian",),
    prefill_vote: bool = False,
    tokenizer: Any = None,
):
    """Vote prompts of ``roles`` seats (default: civilians) from ``num_games`` games played by ``performers``.

    ``prefill_vote``: each prompt ends with the answer started, an assistant turn ``<vote>`` (column
    ``prefill``), so a small model writes a vote within a few tokens; the reward scores ``<vote>`` +
    completion, the same text the env would get. TRL 1.16's ``GRPOTrainer`` opens a new assistant turn
    after a conversation, so pass ``tokenizer`` (a tokenizer or model name): the prompts are then the
    chat template's text continuing ``<vote>`` (TRL's standard, non-conversational format).
    """
    rows = game_rows(config or GameConfig(), performers, num_games, seed, Stage.VOTE, roles)
    if prefill_vote:
        rows = _prefill(rows, VOTE_PREFILL, tokenizer)
    elif tokenizer is not None:
        raise ValueError("tokenizer is only used with prefill_vote=True")
    return _dataset(rows)


VOTE_PREFILL = "<vote>"


def _prefill(rows: list[dict[str, Any]], prefill: str, tokenizer: Any) -> list[dict[str, Any]]:
    if isinstance(tokenizer, str):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    out = []
    for row in rows:
        messages = [*row["prompt"], {"role": "assistant", "content": prefill}]
        if tokenizer is not None:
            messages = tokenizer.apply_chat_template(messages, tokenize=False, continue_final_message=True)
            if not messages.endswith(prefill):
                raise ValueError(f"tokenizer: its chat template does not end the prompt with {prefill!r}")
        out.append({**row, "prompt": messages, "prefill": prefill})
    return out


def spy_dataset(
    config: GameConfig | None = None,
    *,
    num_games: int = 64,
    seed: int = 0,
    performers: str | Sequence[str] = "heuristic",
    role: str = "spy",
):
    """Performing prompts of the ``role`` seat(s): the spy (one per game) or the civilians."""
    if role not in ("spy", "civilian"):
        raise ValueError(f"role must be 'spy' or 'civilian', got {role!r}")
    return _dataset(game_rows(config or GameConfig(), performers, num_games, seed, Stage.PERFORM, (role,)))


class _Reward:
    """A TRL reward function over task rows: ``f(prompts, completions, **columns) -> list[float]``."""

    stage: Stage

    def __init__(self, config: GameConfig | None, name: str) -> None:
        self.config = config or GameConfig()
        self._detectors: Any = None  # the performing reward's fixed detectors (GameReward)
        self.__name__ = name  # TRL names the logged reward column after it

    def _rows(self, n: int, columns: dict[str, Any]) -> list[dict[str, Any]]:
        keys = ("seat", "game_seed", "document_id", "spy_seat", "degrade_seed", "performances", "votes")
        missing = [k for k in keys if k not in columns]
        if missing:
            raise ValueError(f"{self.__name__}: the dataset lacks columns {missing}; build it with spyrl's datasets")
        rows = [{k: columns[k][i] for k in (*keys, "game") if k in columns} for i in range(n)]
        check_rows(self.config, rows, self.__name__)
        return rows

    def details(self, completions: Sequence[Any], **columns: Any) -> list[dict[str, Any]]:
        """Per completion: ``reward``, ``reward_components`` and ``violations`` from the environment."""
        rows = self._rows(len(completions), columns)
        prefills = columns.get("prefill") or [""] * len(completions)  # the answer's start, given in the prompt
        texts = [(p or "") + completion_text(c) for p, c in zip(prefills, completions, strict=True)]
        return replay_rewards(self.config, rows, texts, self.stage, self._detectors)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float]:
        details = self.details(completions, **columns)
        log_extra = columns.get("log_extra")
        if callable(log_extra):  # TRL's completions table shows why a reward is what it is
            log_extra("violations", [", ".join(d["violations"]) for d in details])
        return [d["reward"] for d in details]


class DetectionReward(_Reward):
    """``1[vote = spy]`` (weighted) plus the vote's penalties: the reward of a vote row of the buffer."""

    stage = Stage.VOTE

    def __init__(self, config: GameConfig | None = None) -> None:
        super().__init__(config, "spy_detection")


class GameReward(_Reward):
    """The seat's performing reward when the game is replayed with the model's text in its seat.

    ``detectors`` vote in the replay: an agent spec (scripted ones are fresh and seeded by the
    game's seed, so a text always gets the same reward), a policy, or ``game_seed -> policy``.
    """

    stage = Stage.PERFORM

    def __init__(self, config: GameConfig | None = None, *, detectors: DetectorSpec = "heuristic") -> None:
        super().__init__(config, "spy_game")
        self._detectors = detector_factory(detectors)


detection_reward = DetectionReward()


class SpyEnvironment:
    """One seat of a game for TRL's ``environment_factory`` (tools ``perform`` then ``vote``).

    ``reset(**row)`` takes a row of :func:`spy_dataset` (the prompt already asks for the
    performance); the other seats perform what they performed in that game and vote with
    ``detectors``. ``get_reward`` is the seat's reward for the round (all components, weighted).
    """

    def __init__(self, config: GameConfig | None = None, *, detectors: DetectorSpec = "heuristic") -> None:
        self.config = config or GameConfig()
        self._detectors = detector_factory(detectors)
        self._env = None
        self._row: dict[str, Any] = {}
        self._reward = 0.0

    def reset(self, **row: Any) -> None:
        from spy_env.buffer import reset_args
        from spy_env.env import parallel_env

        check_rows(self.config, [row], "SpyEnvironment")
        self._row = row
        self._env = parallel_env(self.config, rounds=1) if self._env is None else self._env
        self._env.reset(**reset_args(row))
        self._reward = 0.0
        self._observations: dict[str, Any] = {}

    def perform(self, text: str) -> str:
        """Submit your performance of the task on your copy of the document.

        Args:
            text: The full performance (problem, solution, the answer in \\boxed{}).

        Returns:
            The voting prompt: every player's performance and whom you may vote for.
        """
        env = self._require(Stage.PERFORM)
        seat = self._row["seat"]
        actions = {a: text if env.seat_of[a] == seat else self._row["performances"][env.seat_of[a]] for a in env.agents}
        self._observations = env.step(actions)[0]
        return self._observations[env.possible_agents[seat]]["prompt"]

    def vote(self, player: int) -> str:
        """Vote for the player you believe is the spy.

        Args:
            player: The player number (1-based) you vote for.

        Returns:
            The outcome of the round.
        """
        return self._vote(f"<vote>{int(player)}</vote>")

    def get_reward(self) -> float:
        """The seat's reward for the round; a seat that did not perform or vote forfeits that stage
        (an empty text: the env's recorded violation and penalty)."""
        env = self._env
        if env is not None and env.game is not None and not env.game.done:
            if env.game.stage is Stage.PERFORM:
                self.perform("")
            self._vote("")
        return self._reward

    def _vote(self, text: str) -> str:
        from spy_env.policy import Action

        env = self._require(Stage.VOTE)
        me = env.possible_agents[self._row["seat"]]
        others = [a for a in env.agents if a != me]
        detector = self._detectors(int(self._row["game_seed"]))  # one per game, all other seats in one call
        replies = detector.act([self._observations[a] for a in others])
        votes = {a: Action.of(r).text for a, r in zip(others, replies, strict=True)}
        votes[me] = text
        info = env.step(votes)[4][me]
        self._reward = float(env.game.reward(env.game.log[0].result, self._row["seat"]))
        truth = info.get("truth", {})
        return f"Round over. The spy was Player {truth.get('spy_seat', -1) + 1}. Your reward: {self._reward:.3f}."

    def _require(self, stage: Stage):
        env = self._env
        if env is None or env.game is None:
            raise ValueError("reset() the environment before using its tools")
        if env.game.stage is not stage:
            raise ValueError(f"it is the {env.game.stage.value} stage now, not {stage.value}")
        return env
