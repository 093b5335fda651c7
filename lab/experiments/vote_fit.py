"""Can SmolLM2 fit the spy's seat from labels at all? Supervised votes on a fixed set, epoch after epoch.

Issue #26, after four attempts at default-game detection: every attempt, and the labels-only reference
beside it, saw each vote once (320 to 2,048 votes). This asks the question underneath with no trainer,
no rollout and no policy gradient: a plain PyTorch loop trains the whole model on the cross-entropy of
the spy's seat, −log q(spy), over a *fixed* set of civilian votes, epoch after epoch, and reports after
each epoch the loss and the expected accuracy q(spy) on that set (can it be fitted at all?) and on votes
of games on other documents (does what it fits carry over?).

- Games: ``--setting default``, the 5-player ``mask_spans`` game on documents cut at 600 characters
  (attempts 3–4's training game), or ``eased``, 3 players and a blank spy copy (the game where
  detection was learned: the control), with heuristic performers, drawn from the *training* split of
  the corpus only (the trainer's split: held-out documents are never read). The training documents
  are cut in two by their order: the first ``--fit-share`` play the fitted games, the rest the check
  games, so no check vote shares a document with a fitted one.
- Votes: every civilian's vote prompt as the ``hf`` backend renders it (its chat template), then
  ``<vote>``; q(seat) is the softmax of the next token's logits over the legal seats' tokens, what a
  constrained vote samples from and what the trainer's forward votes read.
- Update: AdamW in fp32 on every weight, or with ``--top-layers N`` on the last N blocks and the final
  norm only (the trainer's ``model.train_top_layers``: the tied embeddings frozen), a step every ``--batch`` games (their civilian votes' mean loss,
  gradients accumulated a game at a time), the fitted games in a new seeded order each epoch, the
  gradient's norm clipped at 1.
- Beside each set: the rules of ``agents/rules.py`` on the same votes (``odd-one-out`` finds the spy
  in nearly every game: the four civilians write the same text).

    python lab/experiments/vote_fit.py --out lab/results/vote_fit/vote_fit.json       # 32 min, 2-core CPU
    python lab/experiments/vote_fit.py --epochs 5 --lr 2e-5 --out lab/results/vote_fit/default_lr2e-5.json
    python lab/experiments/vote_fit.py --setting eased --epochs 3 --lr 2e-5 --out lab/results/vote_fit/eased_lr2e-5.json

- ``--device cuda`` runs the same loop on a GPU (fp32), where thousands of votes fit in minutes;
  ``--check-every N`` scores the check set every N steps (a curve against votes and minutes) and
  ``--max-minutes`` ends a run at its first step past the limit, the partial epoch scored.
  ``lab/experiments/vote_fit_plot.py`` draws the curves.

    python lab/experiments/vote_fit.py --device cuda --fit-games 1024 --check-games 96 --epochs 12 --lr 1e-5 --check-every 64 --max-minutes 5 --out default_1024_lr1e-5.json

The committed runs (CPU and GPU) and what they show: lab/results/default_game.md.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from harness import command_of, experiment_parser, user_error

SETTINGS = {
    "default": {"n_players": 5, "degrade": "mask_spans", "max_document_chars": 600},
    "eased": {"n_players": 3, "degrade": "blank", "max_document_chars": 600},  # the spy writes least: a control
}


@dataclass(frozen=True)
class Vote:
    """One civilian's vote: its prompt's token ids, the first token of each legal seat, the spy's index
    among them, and what each rule of ``agents/rules.py`` would score on the same performances."""

    game: int
    ids: list[int]
    seat_tokens: list[int]
    spy: int
    rules: dict[str, float]


def game_configs(setting: str, fit_share: float) -> tuple[Any, Any]:
    """The game config on the fitted documents and on the check documents (both from the training split)."""
    from spy_env.config import GameConfig
    from trainers.documents import training_documents

    config = GameConfig.from_dict(SETTINGS[setting])
    train, _ = training_documents(config, 0.2, 0)  # the trainer's default split
    cut = round(len(train) * fit_share)
    if not 0 < cut < len(train):
        raise ValueError(f"--fit-share {fit_share} leaves one side of {len(train)} training documents empty")
    fitted, checked = train[:cut], train[cut:]
    return replace(config, corpus=fitted, max_documents=None), replace(config, corpus=checked, max_documents=None)


def vote_set(config: Any, games: int, seed: int, tokenizer: Any) -> list[Vote]:
    """Every civilian vote of ``games`` games of ``config`` (seeds ``seed``, ``seed + 1``, ...)."""
    import spy_env
    from agents import HeuristicAgent
    from agents.chat import encode_observation
    from agents.decoding import vote_choices
    from agents.rules import RULES, spy_share

    performer = HeuristicAgent(seed=seed)
    prefix = list(tokenizer.encode("<vote>", add_special_tokens=False))
    votes = []
    for k in range(games):
        env = spy_env.parallel_env(config)
        obs, _ = env.reset(seed=seed + k)
        obs, *_ = env.step(dict(zip(env.agents, performer.act([obs[a] for a in env.agents]), strict=True)))
        spy = int(env.state()[2])  # state(): stage, round, spy seat, alive...
        for seat, agent in enumerate(env.agents):
            if seat == spy:
                continue
            observation = obs[agent]
            choices = vote_choices(observation)
            legal = [int(c) - 1 for c in choices]
            shown = observation["performances"]
            votes.append(
                Vote(
                    game=k,
                    ids=encode_observation(tokenizer, observation) + prefix,
                    seat_tokens=[tokenizer.encode(c, add_special_tokens=False)[0] for c in choices],
                    spy=legal.index(spy),
                    rules={name: spy_share(rule, shown, legal, spy) for name, rule in RULES.items()},
                )
            )
    return votes


def seat_logprobs(model: Any, votes: list[Vote], pad_id: int) -> list[Any]:
    """log q(seat) over each vote's legal seats: the next token's logits after ``<vote>``, renormalised.
    The votes of one game share their prompt up to the seat line, so that prefix is encoded once
    (``agents.prefix_cache``, what the trainer's forward votes use)."""
    import torch

    from agents.prefix_cache import grouped_logits, prefix_groups

    prompts = [v.ids for v in votes]
    logits = grouped_logits(model, prompts, pad_id, prefix_groups(prompts), keep=1)[:, -1]
    return [torch.log_softmax(row[v.seat_tokens].float(), dim=-1) for row, v in zip(logits, votes, strict=True)]


def by_game(votes: list[Vote]) -> list[list[Vote]]:
    games: dict[int, list[Vote]] = {}
    for vote in votes:
        games.setdefault(vote.game, []).append(vote)
    return list(games.values())


def per_game(votes: list[Vote], values: list[float]) -> list[float]:
    """Means per game (the unit the intervals resample: a game's civilians share its performances)."""
    games: dict[int, list[float]] = {}
    for vote, value in zip(votes, values, strict=True):
        games.setdefault(vote.game, []).append(value)
    return [float(np.mean(v)) for v in games.values()]


def measure(model: Any, votes: list[Vote], pad_id: int) -> dict[str, Any]:
    """Loss −log q(spy), expected accuracy q(spy) and greedy accuracy on ``votes``, intervals over games."""
    import torch

    from spy_env.heldout import bootstrap

    losses, q_spy, greedy = [], [], []
    model.eval()
    with torch.no_grad():
        for game in by_game(votes):
            for vote, logq in zip(game, seat_logprobs(model, game, pad_id), strict=True):
                losses.append(-float(logq[vote.spy]))
                q_spy.append(math.exp(float(logq[vote.spy])))
                greedy.append(float(int(logq.argmax()) == vote.spy))
    return {
        "loss": float(np.mean(losses)),
        "expected": bootstrap(per_game(votes, q_spy)).to_dict(),
        "greedy": bootstrap(per_game(votes, greedy)).to_dict(),
    }


def train_epoch(
    model: Any,
    optimizer: Any,
    votes: list[Vote],
    batch: int,
    pad_id: int,
    rng: np.random.Generator,
    after_step: Any = None,
) -> float:
    """One pass over ``votes``' games in a seeded order, a step every ``batch`` games (the mean of their
    votes' −log q(spy)), ``after_step(votes_in_step)`` called after each (the pass ends early when it
    returns True); returns the mean loss of each vote before its step."""
    import torch

    model.train()
    games = by_game(votes)
    order = rng.permutation(len(games))
    losses = []
    for start in range(0, len(order), batch):
        chunk = [games[i] for i in order[start : start + batch]]
        count = sum(len(game) for game in chunk)
        optimizer.zero_grad(set_to_none=True)
        for game in chunk:
            loss = torch.stack([-logq[v.spy] for v, logq in zip(game, seat_logprobs(model, game, pad_id), strict=True)])
            (loss.sum() / count).backward()
            losses += loss.detach().tolist()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if after_step is not None:
            if after_step(count):
                break
            model.train()
    return float(np.mean(losses))


class Curve:
    """The check set's expected accuracy every ``every`` optimizer steps (none when ``every`` is 0),
    against the fitted votes seen so far and the minutes since ``start``; past ``deadline`` seconds
    (0: none) a step says stop."""

    def __init__(self, model: Any, check: list[Vote], pad_id: int, every: int, start: float, deadline: float) -> None:
        self.model, self.check, self.pad_id, self.every, self.start = model, check, pad_id, every, start
        self.deadline = deadline
        self.steps = self.votes = 0
        self.points: list[dict[str, Any]] = []

    def step(self, votes: int) -> bool:
        self.steps += 1
        self.votes += votes
        if self.every and self.steps % self.every == 0:
            check = measure(self.model, self.check, self.pad_id)
            minutes = (time.monotonic() - self.start) / 60
            self.points.append({"steps": self.steps, "votes": self.votes, "minutes": minutes, "check": check})
            print(f"  step {self.steps} ({self.votes} votes): check q(spy) {check['expected']['mean']:.3f}", flush=True)
        return self.out_of_time()

    def out_of_time(self) -> bool:
        return bool(self.deadline) and time.monotonic() - self.start > self.deadline


def rule_table(votes: list[Vote]) -> dict[str, dict[str, float]]:
    from spy_env.heldout import bootstrap

    return {name: bootstrap(per_game(votes, [v.rules[name] for v in votes])).to_dict() for name in votes[0].rules}


def load_model(spec: str, workdir: str, device: str) -> tuple[Any, Any]:
    import torch

    from agents.hf import load_pretrained
    from agents.models import resolve_model_path

    torch.manual_seed(0)
    return load_pretrained(resolve_model_path(spec, tiny_dir=workdir), dtype="float32", device=device)


def parse(argv: list[str] | None) -> Any:
    p = experiment_parser(__doc__, None, "results JSON (written atomically; never overwritten)", overrides=False,
                          overwrite=False)  # fmt: skip
    p.add_argument("--model", default="smollm2", help="smollm2, tiny or a model folder")
    p.add_argument("--setting", choices=sorted(SETTINGS), default="default",
                   help="default: 5 players, mask_spans; eased: 3 players, blank (both 600 characters)")  # fmt: skip
    p.add_argument("--fit-games", type=int, default=32, help="games of the fitted set (4 civilian votes each)")
    p.add_argument("--check-games", type=int, default=24, help="games of the check set, on other documents")
    p.add_argument(
        "--fit-share", type=float, default=2 / 3, help="share of the training documents the fitted games use"
    )
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=2, help="games a step (their civilian votes together)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--top-layers", type=int, default=0,
                   help="train only the last N decoder blocks and the final norm (embeddings frozen); 0: every weight")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (fp32 on any)")
    p.add_argument("--check-every", type=int, default=0,
                   help="also score the check set every N steps (a curve within epochs); 0: after each epoch only")  # fmt: skip
    p.add_argument("--max-minutes", type=float, default=0.0,
                   help="stop at the first step past this many minutes (the epoch then scored as far as it went); 0: none")  # fmt: skip
    args = p.parse_args(argv)
    if args.top_layers < 0:
        p.error("--top-layers must be 0 (every weight) or more")
    for name in ("fit_games", "check_games", "epochs", "batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if not args.lr > 0:
        p.error("--lr must be positive")
    if args.check_every < 0 or args.max_minutes < 0:
        p.error("--check-every and --max-minutes must be 0 (off) or more")
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            p.error(f"--device {args.device}: torch sees no CUDA device here")
    elif args.device not in ("cpu", "auto"):
        p.error(f"--device {args.device}: expected cpu, cuda, cuda:N or auto")
    return args


def row(epoch: int, seconds: float, fit: dict, check: dict, train_loss: float | None) -> dict[str, Any]:
    print(
        f"epoch {epoch}: fit loss {fit['loss']:.3f} q(spy) {fit['expected']['mean']:.3f}, "
        f"check loss {check['loss']:.3f} q(spy) {check['expected']['mean']:.3f} ({seconds / 60:.1f} min)",
        flush=True,
    )
    return {"epoch": epoch, "minutes": seconds / 60, "train_loss": train_loss, "fit": fit, "check": check}


def run(args: Any) -> dict[str, Any]:
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as workdir:
        model, tokenizer = load_model(args.model, workdir, args.device)
        return trained(args, model, tokenizer, start)


def trained(args: Any, model: Any, tokenizer: Any, start: float) -> dict[str, Any]:
    import torch

    from trainers.models import freeze_below

    fit_config, check_config = game_configs(args.setting, args.fit_share)
    fit = vote_set(fit_config, args.fit_games, args.seed, tokenizer)
    check = vote_set(check_config, args.check_games, args.seed + 100_000, tokenizer)
    if args.top_layers:
        blocks = len(model.get_decoder().layers)
        if args.top_layers > blocks:
            raise ValueError(f"--top-layers {args.top_layers}: the model has {blocks} decoder blocks")
        freeze_below(model, args.top_layers)  # what the trainer's model.train_top_layers does
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.0)
    rng = np.random.default_rng(args.seed)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    before = measure(model, fit, pad_id), measure(model, check, pad_id)
    epochs = [row(0, time.monotonic() - start, *before, None)]
    curve = Curve(model, check, pad_id, args.check_every, start, args.max_minutes * 60)
    for epoch in range(1, args.epochs + 1):
        train_loss = train_epoch(model, optimizer, fit, args.batch, pad_id, rng, curve.step)
        after = measure(model, fit, pad_id), measure(model, check, pad_id)
        epochs.append(row(epoch, time.monotonic() - start, *after, train_loss) | {"votes_seen": curve.votes})
        if curve.out_of_time():
            print(f"stopped in epoch {epoch} after {curve.votes} votes: past --max-minutes", flush=True)
            break
    sets = {"fit": fit, "check": check}
    return {
        "command": command_of(__file__, args.argv),
        "setting": {"name": args.setting, **SETTINGS[args.setting]},
        "model": args.model,
        "votes": {name: len(votes) for name, votes in sets.items()},
        "prompt_tokens": {name: float(np.mean([len(v.ids) for v in votes])) for name, votes in sets.items()},
        "update": {
            "lr": args.lr,
            "batch_games": args.batch,
            "epochs": args.epochs,
            "top_layers": args.top_layers,
            "optimizer": "AdamW",
            "dtype": "float32",
            "device": str(next(model.parameters()).device),
        },
        "chance": float(np.mean([1 / len(v.seat_tokens) for v in fit])),
        "uniform_loss": float(np.mean([math.log(len(v.seat_tokens)) for v in fit])),
        "rules": {name: rule_table(votes) for name, votes in sets.items()},
        "epochs": epochs,
        "stopped_early": curve.votes < args.epochs * len(fit),  # --max-minutes ended it
        "curve": curve.points,  # the check set every --check-every steps (empty when 0)
    }


def main(argv: list[str] | None = None) -> int:
    from spy_env.io import write_text
    from spyrl.commands.output import quiet_libraries

    quiet_libraries()  # no "Loading weights" bar before a user's one-line error
    args = parse(argv)
    args.argv = argv
    out = Path(args.out)
    if out.exists():
        return user_error(f"{out} exists: results are never overwritten")
    try:
        result = run(args)
    except (ValueError, OSError) as e:
        return user_error(e)
    write_text(out, json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
