"""Live self-play for TRL's ``GRPOTrainer``: a ``rollout_func`` that plays real games with the model
being trained.

Each dataset row (:func:`selfplay_dataset`) names a game (its seed), a seat and a stage. For each group
of ``num_generations`` copies of a row, :class:`SelfPlayRollout` plays that game with the trainer's
current model in every seat, sampled live:

* stage ``vote``: every seat performs (one sample each, shared by the group); the other seats vote
  (one sample each); the row's seat writes ``num_generations`` votes (the group). Each vote's reward is
  the environment's: ``w_D · 1[vote = spy]`` plus its penalties.
* stage ``perform``: the other seats perform once; the row's seat writes ``num_generations``
  performances (the group); for each one the game goes on with every seat voting, sampled from the
  model. Each performance's reward is the seat's performing reward (``w_P · r^P`` plus penalties).

The rewards come from ``spy_env`` (the same replay as :mod:`spyrl.integrations.trl`'s rewards) and
reach TRL as the extra field ``selfplay_reward``; pass :func:`selfplay_reward` as the reward function.
:func:`selfplay_caught` reads the field ``selfplay_caught`` (1 where a vote named the spy): pass it with
reward weight 0 and TRL logs how often the votes caught the spy, apart from their penalties. Beside it,
:func:`selfplay_rule_baselines` (weight 0 too) logs each rule baseline of :mod:`agents.rules` on the
same games: how often a voter that reads only the surface of the performances would have caught it.
The fields ``selfplay_text`` (the scored text) and ``selfplay_game`` (the game's reset options, the
seat, stage and every other seat's live text) let anyone replay a reward with ``spy_env``.
The trained tokens are exactly the sampled ones, after the live prompt the model saw.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from agents.rules import RULES, Rule, spy_share
from spy_env.config import GameConfig
from spy_env.env import parallel_env
from spy_env.policy import chat_messages
from spy_env.stage import Stage
from spyrl.integrations._games import replay_rewards

__all__ = ["SelfPlayRollout", "selfplay_caught", "selfplay_dataset", "selfplay_reward", "selfplay_rule_baselines"]

_ROW = re.compile(r"^spyrl self-play: game (\d+), player (\d+), (perform|vote)$")
VOTE_PREFILL = "<vote>"


def selfplay_dataset(
    config: GameConfig | None = None,
    *,
    num_games: int = 64,
    seed: int = 0,
    stages: Sequence[str] = ("vote",),
    seats: Sequence[int] | None = None,
):
    """One row per (game, seat, stage): the prompt names them (``spyrl self-play: game 7, player 2,
    vote``); :class:`SelfPlayRollout` plays that game live. ``seats`` default: every seat.

    The spy's own vote row is left out unless ``config.rules.train_spy_vote`` (as in :mod:`trainers`: the spy
    cannot catch itself, so its vote's reward holds penalties only, never detection)."""
    from datasets import Dataset

    config = config or GameConfig()
    bad = sorted(set(stages) - {"vote", "perform"})
    if bad or not stages:
        raise ValueError(f"stages must be 'vote' and/or 'perform', got {list(stages)}")
    if num_games < 1:
        raise ValueError(f"num_games must be >= 1, got {num_games}")
    seats = range(config.rules.n_players) if seats is None else seats
    for seat in seats:
        if not 0 <= seat < config.rules.n_players:
            raise ValueError(f"seats: {seat} is not a seat of a {config.rules.n_players}-player game")
    spies = [-1] * num_games if config.rules.train_spy_vote else _spy_seats(config, seed, num_games)
    rows = [
        {"prompt": [{"role": "user", "content": f"spyrl self-play: game {seed + g}, player {seat + 1}, {stage}"}]}
        for g in range(num_games)
        for seat in seats
        for stage in stages
        if not (stage == "vote" and seat == spies[g])
    ]
    if not rows:
        raise ValueError(f"selfplay_dataset: no rows (seats {list(seats)} are the spy in every game's vote)")
    return Dataset.from_list(rows)


def _spy_seats(config: GameConfig, seed: int, num_games: int) -> list[int]:
    """The spy's seat of games ``seed .. seed + num_games - 1`` (as :class:`SelfPlayRollout` resets them)."""
    env = parallel_env(replace(config, rounds=1))
    seats = []
    for g in range(num_games):
        env.reset(seed=seed + g)
        seats.append(int(env.reset_options["spy_seat"]))
    return seats


def selfplay_reward(prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float]:
    """The environment's reward of each live completion (the rollout's ``selfplay_reward`` field)."""
    rewards = columns.get("selfplay_reward")
    if rewards is None:
        raise ValueError("selfplay_reward needs GRPOTrainer(rollout_func=SelfPlayRollout(...))")
    return [float(r) for r in rewards]


selfplay_reward.__name__ = "selfplay"


def selfplay_caught(prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
    """1.0 where a live vote named the spy, 0.0 where it did not, ``None`` for performances: a metric
    (``reward_weights`` 0 beside :func:`selfplay_reward`; TRL logs it as ``rewards/caught/mean``)."""
    caught = columns.get("selfplay_caught")
    if caught is None:
        raise ValueError("selfplay_caught needs GRPOTrainer(rollout_func=SelfPlayRollout(...))")
    return [None if c is None else float(c) for c in caught]


selfplay_caught.__name__ = "caught"


def selfplay_rule_baselines() -> list[Callable[..., list[float | None]]]:
    """One metric per rule baseline (``rule_<name>``, for ``reward_weights`` 0): for a vote row, the share
    of the rule's picks among the voter's fellow seats that is the spy, on the game's live performances
    (the same for the whole group: the rule reads the performances, not the group's votes); ``None`` for
    performance rows. TRL logs each as ``rewards/rule_<name>/mean`` beside ``rewards/caught/mean``."""
    return [_rule_metric(name, rule) for name, rule in RULES.items()]


def _rule_metric(name: str, rule: Rule) -> Callable[..., list[float | None]]:
    def metric(prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        games = columns.get("selfplay_game")
        if games is None:
            raise ValueError(f"rule_{name} needs GRPOTrainer(rollout_func=SelfPlayRollout(...))")
        out: list[float | None] = []
        for game in games:
            if Stage.of(game["stage"]) is not Stage.VOTE:
                out.append(None)
                continue
            shown = list(game["performances"])
            others = [s for s in range(len(shown)) if s != game["seat"]]
            out.append(spy_share(rule, shown, others, game["spy_seat"]))
        return out

    metric.__name__ = f"rule_{name}"
    return metric


class SelfPlayRollout:
    """``GRPOTrainer(rollout_func=SelfPlayRollout(config))``: see the module's docstring.

    ``perform_tokens``: the budget of every performance (the group's are capped by TRL's
    ``max_completion_length`` too); ``vote_tokens``: of the other seats' votes. ``prefill_vote``: every
    vote starts with ``<vote>`` already written (small models then vote within a few tokens); the
    reward scores ``<vote>`` + completion, as the environment would read it.
    """

    def __init__(
        self,
        config: GameConfig | None = None,
        *,
        perform_tokens: int = 64,
        vote_tokens: int = 8,
        temperature: float = 1.0,
        prefill_vote: bool = True,
    ) -> None:
        self.config = replace(config or GameConfig(), rounds=1)
        if perform_tokens < 1 or vote_tokens < 1:
            raise ValueError("perform_tokens and vote_tokens must be >= 1")
        self.perform_tokens, self.vote_tokens = perform_tokens, vote_tokens
        self.temperature, self.prefill_vote = temperature, prefill_vote
        self.__name__ = "spyrl_selfplay"

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        gen = _Generator(trainer, self.temperature)
        budget = int(trainer.args.max_completion_length or self.perform_tokens)  # a GRPOConfig field
        groups: dict[tuple[int, int, str], list[int]] = {}
        for i, prompt in enumerate(prompts):
            groups.setdefault(_parse(prompt, self.config.rules.n_players), []).append(i)
        n = len(prompts)
        out: dict[str, list] = {k: [None] * n for k in ("prompt_ids", "completion_ids", "selfplay_reward")}
        out.update(selfplay_text=[""] * n, selfplay_game=[None] * n, selfplay_caught=[None] * n)
        for (game_seed, seat, stage), members in groups.items():
            row, observation = self._play_to(gen, game_seed, seat, Stage.of(stage))
            prefill = VOTE_PREFILL if stage == "vote" and self.prefill_vote else ""
            tokens = min(budget, self.perform_tokens) if stage == "perform" else budget
            ids, outs, texts = gen.sample([chat_messages(observation)] * len(members), tokens, prefill)
            sampled_logprobs = gen.logprobs if gen.engine is not None else None
            voters = _TrainerPolicy(gen, self.vote_tokens, self.prefill_vote)
            detectors = (lambda s, v=voters: v) if stage == "perform" else None
            texts = [prefill + t for t in texts]
            scored = replay_rewards(self.config, [row] * len(members), texts, Stage.of(stage), detectors)
            for k, i in enumerate(members):
                out["prompt_ids"][i], out["completion_ids"][i] = ids[k], outs[k]
                if sampled_logprobs is not None:
                    out.setdefault("logprobs", [None] * n)[i] = sampled_logprobs[k]
                out["selfplay_reward"][i], out["selfplay_text"][i] = scored[k]["reward"], texts[k]
                out["selfplay_game"][i] = {**row, "stage": stage}
                if stage == "vote":
                    out["selfplay_caught"][i] = scored[k]["reward_components"]["detect"]
        out.setdefault("logprobs", None)  # sampled with the engine: its log-probabilities; else TRL computes them
        return out

    def _play_to(self, gen: _Generator, game_seed: int, seat: int, stage: Stage):
        """Play the game live up to ``seat``'s turn at ``stage``: the row replay needs, and its observation."""
        env = parallel_env(self.config)
        observations, _ = env.reset(seed=game_seed)
        agents = list(env.agents)
        me = env.possible_agents[seat]
        who = agents if stage is Stage.VOTE else [a for a in agents if a != me]
        texts = gen.sample([chat_messages(observations[a]) for a in who], self.perform_tokens, "")[2]
        performances = dict(zip(who, texts, strict=True))
        performances.setdefault(me, "")
        row = {"seat": seat, "game_seed": game_seed, **env.reset_options}
        row["performances"] = [performances[a] for a in env.possible_agents]
        if stage is Stage.PERFORM:
            row["votes"] = [""] * self.config.rules.n_players
            return row, observations[me]
        observations = env.step(performances)[0]
        others = [a for a in agents if a != me]
        policy = _TrainerPolicy(gen, self.vote_tokens, self.prefill_vote)
        votes = dict(zip(others, policy.act([observations[a] for a in others]), strict=True))
        row["votes"] = [votes.get(a, "") for a in env.possible_agents]
        return row, observations[me]


def _parse(prompt: Any, n_players: int) -> tuple[int, int, str]:
    text = prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)
    match = _ROW.match(text.strip())
    if match is None:
        raise ValueError(f"SelfPlayRollout: a prompt is not a selfplay_dataset row: {text[:80]!r}")
    game_seed, player, stage = int(match.group(1)), int(match.group(2)), match.group(3)
    if not 1 <= player <= n_players:
        raise ValueError(f"SelfPlayRollout: player {player} is not in a {n_players}-player game")
    return game_seed, player - 1, stage


class _Generator:
    """Samples from the trainer's current model (eval mode, no gradient), with its chat template; through
    the trainer's vLLM engine when it has one (``use_vllm=True``: TRL syncs its weights before the rollout)."""

    def __init__(self, trainer: Any, temperature: float) -> None:
        self.model = trainer.accelerator.unwrap_model(trainer.model)
        self.tokenizer = trainer.processing_class
        self.temperature = temperature
        self.engine = trainer.vllm_generation if trainer.args.use_vllm else None
        self.logprobs: list[list[float]] | None = None  # the engine's, of the last sample

    def sample(self, conversations: list[list[dict[str, str]]], max_new_tokens: int, prefill: str):
        """Per conversation: prompt ids (prefill included), completion ids (up to EOS) and text."""
        import torch

        tok = self.tokenizer
        prompts = []
        for messages in conversations:
            if prefill:
                messages = [*messages, {"role": "assistant", "content": prefill}]
                text = tok.apply_chat_template(messages, tokenize=False, continue_final_message=True)
            else:
                text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            prompts.append(tok(text, add_special_tokens=False)["input_ids"])
        if self.engine is not None:
            completions, self.logprobs = self._engine_sample(prompts, max_new_tokens)
            return prompts, completions, tok.batch_decode(completions, skip_special_tokens=True)
        width = max(len(p) for p in prompts)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        device = next(self.model.parameters()).device
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                out = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=mask,
                    max_new_tokens=max_new_tokens,
                    do_sample=True,
                    temperature=self.temperature,
                    pad_token_id=pad,
                )
        finally:
            self.model.train(was_training)
        completions = []
        for row in out[:, width:].tolist():
            if tok.eos_token_id in row:
                row = row[: row.index(tok.eos_token_id) + 1]
            completions.append(row)
        texts = tok.batch_decode(completions, skip_special_tokens=True)
        return prompts, completions, texts

    def _engine_sample(self, prompts: list[list[int]], max_new_tokens: int) -> tuple[list[list[int]], list]:
        """TRL's ``VLLMGeneration.generate`` with this call's budget and temperature: completions and the
        engine's per-token log-probabilities (TRL's importance-sampling correction reads them)."""
        engine = self.engine
        saved = engine.max_completion_length, engine.temperature
        engine.max_completion_length, engine.temperature = max_new_tokens, self.temperature
        try:
            _, completions, logprobs, _ = engine.generate(prompts, None, 1)
        finally:
            engine.max_completion_length, engine.temperature = saved
        per_token = [[step[0] for step in row] for row in logprobs] if logprobs is not None else None
        return [[int(t) for t in c] for c in completions], per_token


class _TrainerPolicy:
    """The trainer's model as a seat's policy (for the votes of the live game)."""

    def __init__(self, gen: _Generator, vote_tokens: int, prefill_vote: bool) -> None:
        self.gen, self.vote_tokens = gen, vote_tokens
        self.prefill = VOTE_PREFILL if prefill_vote else ""

    def act(self, observations: list[Any]) -> list[str]:
        texts = self.gen.sample([chat_messages(o) for o in observations], self.vote_tokens, self.prefill)[2]
        return [self.prefill + t for t in texts]
