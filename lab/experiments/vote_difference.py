"""Why the trainer's sampled votes did not teach SmolLM2 when a plain update did (issue #18, TUNING.md).

Plays one iteration of attempt 3's rollouts (16 games of the eased setting, heuristic performers,
SmolLM2 voting with ``generate`` among the legal seats) and feeds the resulting civilian vote rows
to the trainer's pieces:

1. **Where the choice's probability mass is.** At the choice step after ``<vote>``, the share of the
   model's whole-vocabulary mass on the legal seats, ``P(legal)``. The vote is drawn from the
   renormalised distribution ``q``; the trainer used to score it with ``log p = log q + log P(legal)``.
2. **The gradient at the seat token**, in logit space at the choice step (what every estimator
   differs in; the map to parameters is the same linear one). Over ``--draws`` resamplings of the
   batch's votes from ``q``, the mean cosine between one batch's gradient and the exact expected
   gradient ``Σ_k q_k r_k ∇log q_k`` (the direction the plain update of the pilot follows), for:
   the old trainer path (whole-vocabulary score, Eq. 5 per game), each fix alone, and both.
3. **What one optimizer step does** with the old path on the first 8 rows: the other rows' ratios
   ``p_new/p_old`` (what clipped attempt 3's next three mini-batches) split into the change of the
   choice ``q`` and of ``P(legal)``.

    python lab/experiments/vote_difference.py --out lab/results/vote_difference.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from harness import command_of, experiment_parser, user_error

from spy_env.io import refuse_existing_outputs, write_text
from spy_env.stage import Stage
from trainers import SpyRLConfig, SpyRLTrainer
from trainers.algorithm import group_normalized_advantages
from trainers.choices import Choice
from trainers.loss import loss_items
from trainers.metrics import UpdateTotals
from trainers.update import TrainingSamples

ATTEMPT3 = {  # the smollm2-selfplay preset of attempt 3 (lab/results/TUNING.md)
    "documents_per_iteration": 8, "games_per_document": 2, "updates_per_iteration": 4, "forward_votes": False,
    "vote_gradient": "sampled", "detect_advantage_groups": "game",
}  # fmt: skip


def choice_logits(trainer: SpyRLTrainer, rows: list[dict]) -> torch.Tensor:
    """(B, V) whole-vocabulary logits at each row's choice step, under the trainer's current model."""
    out = []
    with torch.no_grad():
        for row in rows:
            step = row["choice_step"]
            ids = list(row["prompt_token_ids"]) + list(row["completion_token_ids"][:step])
            out.append(trainer.model(input_ids=torch.tensor([ids]), logits_to_keep=1).logits[0, -1].float())
    return torch.stack(out)


def logit_gradients(scores, choices, spies, votes, groups) -> np.ndarray:
    """(B, V) gradient of the sampled objective at the choice logits (``scores``: the (B, V) score
    function's −probabilities, whole-vocabulary or renormalised), advantages normalised by ``groups``."""
    rewards = [float(c.seats[v] == s) for c, s, v in zip(choices, spies, votes, strict=True)]
    advantages = group_normalized_advantages(rewards, groups, eps=1e-4)
    grads = scores.copy()
    for i, (choice, vote) in enumerate(zip(choices, votes, strict=True)):
        grads[i, choice.tokens[vote]] += 1.0
    return grads * advantages[:, None]


def exact_gradient(logits, choices, spies) -> np.ndarray:
    """(B, V) ``Σ_k q_k r_k ∇log q_k``: the gradient of the expected detection reward."""
    grads = np.zeros(logits.shape)
    for i, (choice, spy) in enumerate(zip(choices, spies, strict=True)):
        q = torch.softmax(logits[i, list(choice.tokens)], -1).numpy().astype(np.float64)
        r = np.array([float(s == spy) for s in choice.seats])
        grads[i, list(choice.tokens)] = q * r - q * (q @ r)
    return grads


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float((a * b).sum() / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def gradient_alignment(logits, choices, spies, q, games, draws: int) -> dict[str, dict[str, float]]:
    """Mean cosine of one batch's logit-space gradient with the exact one, over ``draws`` resampled votes."""
    exact = exact_gradient(logits, choices, spies)
    forms = {
        "old trainer (whole-vocabulary score, Eq. 5 per game)": (True, games),
        "whole-vocabulary score, normalised over the batch": (True, [0] * len(games)),
        "renormalised score, Eq. 5 per game": (False, games),
        "renormalised score, normalised over the batch (the plain update)": (False, [0] * len(games)),
    }
    whole = -torch.softmax(logits, -1).double().numpy()
    renormalised = np.zeros(whole.shape)
    for i, choice in enumerate(choices):
        renormalised[i, list(choice.tokens)] = -torch.softmax(logits[i, list(choice.tokens)], -1).numpy()
    rng = np.random.default_rng(0)
    cosines: dict[str, list[float]] = {name: [] for name in forms}
    zero = dict.fromkeys(forms, 0)
    for _ in range(draws):
        votes = [int(rng.choice(len(x), p=x / x.sum())) for x in q]
        for name, (whole_vocab, groups) in forms.items():
            g = logit_gradients(whole if whole_vocab else renormalised, choices, spies, votes, groups)
            if not g.any():
                zero[name] += 1
                continue
            cosines[name].append(cosine(g, exact))
    return {
        name: {"mean": float(np.mean(v)) if v else math.nan, "zero_gradient_draws": zero[name] / draws}
        for name, v in cosines.items()
    }


def one_old_step(trainer, config, selected, choices, logits) -> dict[str, float]:
    """One optimizer step of the old path (whole-vocabulary scores) on the first 8 samples; how the others move."""
    samples = TrainingSamples.from_samples(selected, config.decoding.max_completion_tokens)
    rows = samples.rows
    samples.choices = [None] * len(rows)  # the old path: whole-vocabulary log-probs
    trainer.model.train()
    mini, budget = list(range(8)), config.decoding.max_completion_tokens
    objective = config.loss.objective("action", budget, config.advantages.vote_gradient)
    items = loss_items([samples.scored[i] for i in mini], "action")
    trainer.updater._optimizer_step(samples, mini, objective, items, config.decoding.temperature, UpdateTotals())
    trainer.model.eval()
    after = choice_logits(trainer, rows)
    moves = []
    for i in range(8, len(rows)):
        tokens, vote = list(choices[i].tokens), choices[i].tokens[choices[i].taken]
        before_p, after_p = torch.log_softmax(logits[i], -1), torch.log_softmax(after[i], -1)
        d_logp = float(after_p[vote] - before_p[vote])
        d_legal = float(torch.logsumexp(after_p[tokens], -1) - torch.logsumexp(before_p[tokens], -1))
        moves.append((d_logp, d_logp - d_legal, d_legal))
    m = np.array(moves)
    ratio_p, ratio_q = np.exp(m[:, 0]), np.exp(m[:, 1])
    legal_after = [float(torch.softmax(z, -1)[list(c.tokens)].sum()) for z, c in zip(after, choices, strict=True)]
    return {
        "other_rows": len(moves),
        "p_legal_after": float(np.mean(legal_after)),
        "ratio_p_mean": float(ratio_p.mean()),
        "ratio_p_outside_clip": float(((ratio_p < 0.8) | (ratio_p > 1.2)).mean()),
        "ratio_q_mean": float(ratio_q.mean()),
        "ratio_q_outside_clip": float(((ratio_q < 0.8) | (ratio_q > 1.2)).mean()),
        "mean_abs_dlog_p": float(np.abs(m[:, 0]).mean()),
        "mean_abs_dlog_q": float(np.abs(m[:, 1]).mean()),
        "mean_abs_dlog_p_legal": float(np.abs(m[:, 2]).mean()),
    }


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser(__doc__, "runs/vote_difference.json", "the JSON file to write", overrides=False)
    p.add_argument("--draws", type=int, default=500)
    args = p.parse_args(argv)
    try:  # before the work, not after
        refuse_existing_outputs([args.out], overwrite=args.overwrite)
    except ValueError as e:
        return user_error(e)
    torch.manual_seed(0)
    config = SpyRLConfig.preset(
        "smollm2-selfplay", performer="heuristic", output_dir="runs/vote_difference", progress=False,
        keep_buffers=False, **ATTEMPT3,
    )  # fmt: skip
    trainer = SpyRLTrainer(config)
    selected, _ = trainer.select_samples(trainer.rollouts(), Stage.VOTE)
    rows = [s.row for s in selected]
    choices = [Choice.of(r) for r in rows]
    spies = [r["spy_seat"] for r in rows]
    logits = choice_logits(trainer, rows)
    p_legal = [float(torch.softmax(z, -1)[list(c.tokens)].sum()) for z, c in zip(logits, choices, strict=True)]
    q = [torch.softmax(z[list(c.tokens)], -1).numpy() for z, c in zip(logits, choices, strict=True)]
    alignment = gradient_alignment(logits, choices, spies, q, [(r["game_id"], r["round"]) for r in rows], args.draws)
    step = one_old_step(trainer, config, selected, choices, logits)
    result = {
        "command": command_of(__file__, argv),
        "rows": len(rows),
        "p_legal": {"mean": float(np.mean(p_legal)), "min": float(np.min(p_legal)), "max": float(np.max(p_legal))},
        "gradient_cosine_with_exact": alignment,
        "one_old_step_on_8_rows": step,
    }
    write_text(Path(args.out), json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
