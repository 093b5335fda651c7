"""Cheap votes: a constrained vote is one forward pass, and with one on-policy update that pass trains.

A ``constrained`` vote's reply is ``<vote>k</vote>`` with only ``k`` chosen by the model, so the
``generate`` loop (prefill, then one step per forced tag token) computes nothing a single forward
over ``prompt + <vote>`` does not: the choice logits are at its last position. :class:`ForwardVotes`
plays votes that way (performances and other votes go to the wrapped ``hf`` policy, or to
:attr:`ForwardVotes.others` when the trainer rolls out with vLLM) and records
the same action: the forced tags, the choice (drawn from the model's distribution at the rollout
temperature, renormalised over the legal seats), ``completion_mask``, ``vote_distribution``, the
choice step and tokens. The forced closing tag's log-probabilities are never computed: they are
recorded as NaN.

With ``keep_graphs`` (the trainer turns it on when the iteration's only update is on-policy: one
mini-batch, one epoch, no KL, one process) the forward runs with gradients and each vote's choice
log-probs stay attached to their graph in :attr:`ForwardVotes.retained`; the update then reads the
current log-probs from there instead of running a second prefill (:meth:`trainers.update.Updater.fit`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from agents.decoding import VoteProgram, is_vote
from agents.hf import HFPolicy
from agents.prefix_cache import grouped_logits, prefix_groups
from agents.tensors import left_pad
from spy_env.policy import Action, Observation

__all__ = ["ForwardVotes", "release_retained", "retained_for_update", "retained_logps"]


class ForwardVotes:
    """An :class:`~agents.hf.HFPolicy` whose constrained votes take one forward pass (see the module docstring)."""

    def __init__(self, learner: HFPolicy, *, keep_graphs: bool = False) -> None:
        if not learner.decoding.vote.one_forward_pass:
            raise ValueError(f"ForwardVotes plays constrained votes, got vote_mode {learner.decoding.vote_mode!r}")
        if learner.sampling.top_p < 1 or learner.sampling.top_k:
            raise ValueError("ForwardVotes samples from the whole choice distribution: top_p must be 1 and top_k 0")
        self.learner = learner
        self.others: Any = None  # a rollout policy for the rest (vLLM, trainers.vllm_engine); None: learner
        self.name = learner.name
        self.keep_graphs = keep_graphs
        self.retained: dict[tuple[int, ...], torch.Tensor] = {}  # prompt + tag ids -> (C,) choice log-probs
        self._generator = torch.Generator()
        self._calls = 0

    # ----------------------------------------------- rollout policy (spy_env.policy.RolloutPolicy)
    def restart_sampling(self, seed: int | None) -> None:
        self.learner.restart_sampling(seed)
        if self.others is not None:
            self.others.restart_sampling(seed)
        self._calls = 0

    def sync(self) -> None:
        """Votes are played by the trained model itself; the policy of the rest gets the new weights."""
        if self.others is not None:
            self.others.sync()

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        out: list[Action | None] = [None] * len(observations)
        votes: list[tuple[int, list[int], VoteProgram]] = []
        others = []
        for i, observation in enumerate(observations):
            program = self.learner.program(observation) if is_vote(observation) else None
            if isinstance(program, VoteProgram) and _single_token_choices(program):
                votes.append((i, self.learner.encode(observation), program))
            else:
                others.append(i)
        if others:
            rest = self.others if self.others is not None else self.learner
            for i, action in zip(others, rest.act([observations[i] for i in others]), strict=True):
                out[i] = action
        size = self.learner.batch_size
        for start in range(0, len(votes), size):
            chunk = votes[start : start + size]
            for (i, _, _), action in zip(
                chunk, self._votes([p for _, p, _ in chunk], [g for *_, g in chunk]), strict=True
            ):
                out[i] = action
        return out  # type: ignore[return-value]

    # ---------------------------------------------------------------- votes
    def _votes(self, prompts: list[list[int]], programs: list[VoteProgram]) -> list[Action]:
        """One batched forward over ``prompt + <vote>``; the choice drawn at the last position."""
        model, sampling = self.learner.model, self.learner.sampling
        prefix = programs[0].prefix
        inputs = [p + prefix for p in prompts]
        grad = self.keep_graphs and any(p.requires_grad for p in model.parameters())
        mode = model.training
        model.train(grad)  # the update's mode: gradient checkpointing (if on) keeps only block inputs
        try:
            with torch.enable_grad() if grad else torch.inference_mode():
                logits = self._forward(inputs, len(prefix) + 1, checkpointed=grad and _checkpointed(model))
        finally:
            model.train(mode)
        raw = torch.log_softmax(logits.detach(), dim=-1)
        if sampling.seed is not None:
            self._generator.manual_seed(sampling.seed + 7919 * self._calls)
        self._calls += 1
        actions = []
        for row, (prompt, program) in enumerate(zip(prompts, programs, strict=True)):
            firsts = program.first_tokens()
            tokens = list(firsts.values())
            scores = logits[row, -1, tokens]
            if sampling.greedy:
                logq, taken = torch.log_softmax(scores, dim=-1), int(scores.detach().argmax())
            else:
                logq = torch.log_softmax(scores / sampling.temperature, dim=-1)
                taken = int(torch.multinomial(logq.detach().exp().cpu(), 1, generator=self._generator))
            if grad:
                self.retained[tuple(prompt + prefix)] = logq
            actions.append(self._action(prompt, program, raw[row], list(firsts), tokens, taken))
        return actions

    def _forward(self, inputs: list[list[int]], keep: int, *, checkpointed: bool) -> torch.Tensor:
        """(B, keep, V) float logits of the inputs' last ``keep`` positions: the tag's tokens, then the choice.

        Prompts sharing a prefix (a game's civilians) encode it once (:mod:`agents.prefix_cache`), and
        with gradients every row of a group backpropagates into that one prefix graph. Gradient
        checkpointing drops the cache, so checkpointed forwards run one left-padded batch instead.
        """
        model, pad_id = self.learner.model, self.learner.pad_id
        if self.learner.share_prefix and not checkpointed and len(inputs) > 1:
            return grouped_logits(model, inputs, pad_id, prefix_groups(inputs, keep=keep), keep).float()
        ids, attention = left_pad(inputs, pad_id)
        device = next(model.parameters()).device
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        return model(
            input_ids=ids.to(device),
            attention_mask=attention.to(device),
            position_ids=positions.to(device),
            logits_to_keep=keep,
            use_cache=False,
        ).logits.float()

    def _action(
        self,
        prompt: list[int],
        program: VoteProgram,
        raw: torch.Tensor,
        names: list[str],
        tokens: list[int],
        taken: int,
    ) -> Action:
        prefix, eos = program.prefix, program.eos
        completion = [*prefix, tokens[taken], *program.suffix, eos]
        logprobs = [float(raw[k, t]) for k, t in enumerate([*prefix, tokens[taken]])]
        logprobs += [math.nan] * (len(completion) - len(logprobs))  # the closing tag is forced and never scored
        distribution = torch.softmax(raw[-1, tokens], dim=-1).tolist()  # temperature 1, as the hf backend records
        tokenizer = self.learner.tokenizer
        return Action(
            text=tokenizer.decode(completion, skip_special_tokens=True),
            prompt_token_ids=list(prompt),
            completion_token_ids=completion,
            logprobs=logprobs,
            finish_reason="stop",
            completion_mask=[0] * len(prefix) + [1] + [0] * (len(completion) - len(prefix) - 1),
            vote_distribution=dict(zip(names, distribution, strict=True)),
            choice_step=len(prefix),
            choice_tokens=dict(zip(names, tokens, strict=True)),
        )

    def choice_logps(self, row: dict[str, Any]) -> torch.Tensor | None:
        """The retained (C,) choice log-probs (with their graph) of a buffer row's vote, or None."""
        step = row.get("choice_step", -1)
        if step is None or step < 0:
            return None
        return self.retained.get(tuple(row["prompt_token_ids"]) + tuple(row["completion_token_ids"][:step]))


def _checkpointed(model: torch.nn.Module) -> bool:
    """Whether gradient checkpointing is on (transformers marks each checkpointed block's flag)."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def _single_token_choices(program: VoteProgram) -> bool:
    """Whether each choice is one token, distinct from the others (seats 1–9): one forward decides it."""
    ids = list(program.choices.values())
    return program.think_tokens == 0 and all(len(x) == 1 for x in ids) and len({x[0] for x in ids}) == len(ids) > 1


def retained_logps(
    policy: ForwardVotes, rows: Sequence[dict[str, Any]], completions: Sequence[Sequence[int]], choices: Sequence[Any]
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]] | None:
    """``(logps, mask, choice_logps)`` of votes from the rollout's retained graphs, shaped as
    :func:`trainers.logprobs.sequence_logps` returns them (only the choice token carries a log-prob:
    the others are forced and never scored); None when a row has no retained choice (the update then
    runs its own forward)."""
    found = [
        policy.choice_logps(row) if choice is not None else None for row, choice in zip(rows, choices, strict=True)
    ]
    if any(x is None for x in found):
        return None
    width = max(len(c) for c in completions)
    logps = torch.zeros(len(rows), width, device=found[0].device)
    mask = torch.zeros(len(rows), width, device=found[0].device)
    for k, (completion, choice, logq) in enumerate(zip(completions, choices, found, strict=True)):
        mask[k, : len(completion)] = 1.0
        at = torch.zeros(width, device=logq.device).index_fill(0, torch.tensor([choice.step], device=logq.device), 1.0)
        logps[k] = at * logq[choice.taken]
    return logps, mask, found  # type: ignore[return-value]


def release_retained(policy: object) -> None:
    """Drop the graphs a :class:`ForwardVotes` rollout kept: once the iteration's update holds what it needs
    of them, they are spent."""
    if isinstance(policy, ForwardVotes):
        policy.retained.clear()


def retained_for_update(policy: object, samples: Any, size: int, single: bool) -> tuple | None:
    """``(logps, mask, choice_logps)`` of every sample from a :class:`ForwardVotes` rollout's kept graphs,
    when this iteration's update is one on-policy optimizer step over all of them (``single``:
    :attr:`trainers.update.Updater.one_step`; ``size``: the mini-batch); None when it is not, or a row was not
    kept (the update then runs its own forward). The rollout's kept graphs are released either way: the
    update holds what it takes of them. The trainer's one update path takes either."""
    kept = None
    rows = samples.rows
    if single and isinstance(policy, ForwardVotes) and policy.retained and rows and size >= len(rows):
        kept = retained_logps(policy, rows, samples.completions, samples.choices)
    release_retained(policy)
    return kept
