"""The leaderboard's fixed sets: one number per model, comparable across runs and papers.

Two versioned sets ship with the package (``spy_env/data/leaderboard/*.json``), built once from the
documents every training preset holds out (:func:`spy_env.corpus.split_documents`, fraction 0.2):

- **detect**: N fixed games whose performances were produced once by fixed reference players
  (scripted heuristic performers, each seat extracting 2–4 numbers of its copy, so the civilians'
  texts differ). The model reads each game from one civilian's seat (the env's real vote prompt
  for that game) and votes. Score: detection accuracy (abstentions and invalid votes are misses;
  chance is 1/4 with 5 players), plus the expected accuracy when the backend reports its vote
  distribution.
- **spy**: N fixed games where the model holds the spy seat: it performs on its degraded copy,
  the civilians' performances are the stored reference texts and the civilians vote with fixed
  detectors (the ``heuristic`` agent, seeded per game). The spy's own vote is fixed to N/A, so the
  score measures only how well its performance blends in. Score: survival rate (plurality voting
  did not single out the spy).

Every score comes with a bootstrap 95% interval over games (:mod:`spy_env.heldout`). A set
records its game config, each game's setup (document id, spy seat, degradation seed, env seed)
and the SHA-256 of the document and of the spy's copy, so a changed corpus or degradation
operator is an error rather than a silently different set; the SHA-256 of the whole file
must be the released one (:data:`RELEASED_SHA256`), so rewritten games or performances are an
error too; a change of the game means a new ``version``. :func:`build_set` rebuilds a set byte for byte (a test checks it).

The same games are built over the sealed confirm split (:mod:`spy_env.confirm`) for a committed
pre-registration only: the sets ``confirm-detect`` and ``confirm-spy`` (:func:`confirm_set`). Every
scoring is a look recorded in the evaluation ledger (:mod:`spy_env.ledger`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from spy_env.config import GameConfig
from spy_env.confirm import open_confirm
from spy_env.corpus import HELDOUT_FRACTION, HELDOUT_SALT, CorpusFilter, Document, load_corpus, split_documents
from spy_env.env import parallel_env
from spy_env.heldout import Interval, bootstrap
from spy_env.io import parse_json, write_text
from spy_env.ledger import Look, headline
from spy_env.policy import Action, Policy, policy_name
from spy_env.runner import _call as call_policy
from spy_env.runner import safe_reason

__all__ = [
    "KINDS",
    "VERSION",
    "LeaderboardGame",
    "LeaderboardSet",
    "build_set",
    "confirm_set",
    "heldout_documents",
    "item_score",
    "leaderboard_table",
    "load_set",
    "run_leaderboard",
    "set_path",
    "write_set",
]

KINDS = ("detect", "spy")
DOCUMENTS = ("heldout", "confirm")  # what a set's games are played on: the released sets, or the sealed split
VERSION = 1
# The SHA-256 of every released set file: a set is scored under its name only if its file is the
# released one byte for byte (a set whose stored performances were rewritten is not detect-v1).
# A new version adds its hash here.
RELEASED_SHA256 = {
    "detect-v1": "9cbe4c10d271394e5c7dbd5c21c1eb5a93b3d5a6a70316454adfaa65f67c1c44",
    "spy-v1": "3ae3a8a2b69ac78f235e6d8c38e9bd3897f51bd0700eb24590fc5ed6592b82e0",
}
NUM_GAMES = 100
ABSTAIN = "<vote>N/A</vote>"
# What each set reports, headline first.
METRICS = {
    "detect": ("detection_accuracy", "expected_accuracy", "na_rate", "valid_vote_rate"),
    "spy": ("survival_rate", "clean_survival_rate", "votes_against_share", "no_answer_rate", "valid_performance_rate"),
}
# Scores the compare table shows under a set's headline, with what they mean (in every result's protocol).
SECONDARY = {
    "spy": {
        "clean_survival_rate": "survival_rate with a performance that broke a rule of the game (its violations: "
        "a verbatim copy of its copy, no answer, ...) counted as caught. The fixed detectors read only numbers "
        "and terms, so a spy that pastes its copy reads like a civilian to them; the game penalises the paste."
    }
}


@dataclass(frozen=True)
class LeaderboardGame:
    """One fixed game: its setup and the stored performances (``None`` at the model's seat)."""

    game_seed: int
    document_id: str
    document_sha256: str
    spy_seat: int
    degrade_seed: int
    spy_copy_sha256: str
    seat: int  # the model's seat: a civilian voter (detect) or the spy (spy)
    performances: tuple[str | None, ...]

    def options(self) -> dict[str, Any]:
        return {"document_id": self.document_id, "spy_seat": self.spy_seat, "degrade_seed": self.degrade_seed}


@dataclass(frozen=True)
class LeaderboardSet:
    kind: str
    version: int
    config: GameConfig
    games: tuple[LeaderboardGame, ...]
    sha256: str
    split: str = "heldout"  # one of DOCUMENTS
    preregistration: Mapping[str, str] | None = None  # {"path", "commit"} of the plan it is scored under

    @property
    def name(self) -> str:
        return f"confirm-{self.kind}" if self.split == "confirm" else f"{self.kind}-v{self.version}"


def set_path(kind: str, version: int = VERSION) -> Path:
    """Where the shipped set lives inside the installed ``spy_env`` package."""
    _check_kind(kind)
    return Path(str(resources.files("spy_env") / "data" / "leaderboard" / f"{kind}-v{version}.json"))


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"leaderboard set must be one of {KINDS}, got {kind!r}")


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def heldout_documents(config: GameConfig, fraction: float = HELDOUT_FRACTION) -> list[Document]:
    """The held-out split of the config's corpus (what no preset trains on), in corpus order."""
    filt = CorpusFilter(truncate=config.limits.max_document_chars)
    documents = load_corpus(config.source.corpus, filt, max_documents=config.source.max_documents)
    return split_documents(documents, fraction)[1]


# ------------------------------------------------------------------------ build
def build_set(
    kind: str,
    num_games: int = NUM_GAMES,
    *,
    seed: int = 0,
    config: GameConfig | None = None,
    documents: Sequence[Document] | None = None,
) -> str:
    """The JSON text of a set: ``num_games`` games on ``documents`` (default: the held-out split of the
    config's corpus, what the released sets are built on), reference performances.

    Deterministic: the same arguments give the same text. Reference performers are scripted
    heuristic agents, one per seat with 2–4 salient numbers (drawn per game), so civilians do not
    all write the same text.
    """
    _check_kind(kind)
    config = config or GameConfig()
    if documents is None:
        documents = heldout_documents(config)
        source = {"heldout": {"corpus": config.source.corpus, "fraction": HELDOUT_FRACTION, "salt": HELDOUT_SALT}}
        if not documents:
            raise ValueError("the corpus has no held-out documents to build a leaderboard set from")
    else:
        source = {"documents": {"count": len(documents)}}
        if not documents:
            raise ValueError("a leaderboard set needs at least one document")
    games = _build_games(kind, config, list(documents), num_games, seed)
    return json.dumps(_set_payload(kind, config, games, seed=seed, source=source), indent=1, ensure_ascii=False) + "\n"


def _build_games(
    kind: str, config: GameConfig, documents: list[Document], num_games: int, seed: int
) -> list[dict[str, Any]]:
    """Each game's setup and reference performances (:func:`build_set`)."""
    from agents.scripted import HeuristicAgent

    env = parallel_env(replace(config, corpus=tuple(documents), max_documents=None))
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    n = config.rules.n_players
    games = []
    for i in range(num_games):
        if i % len(documents) == 0:
            order = rng.permutation(len(documents))
        document = documents[int(order[i % len(documents)])]
        spy_seat = int(rng.integers(n))
        civilians = [s for s in range(n) if s != spy_seat]
        seat = spy_seat if kind == "spy" else int(rng.choice(civilians))
        n_numbers = [int(k) for k in rng.integers(2, 5, size=n)]
        game_seed, degrade_seed = int(rng.integers(2**31 - 1)), int(rng.integers(2**63 - 1))
        options = {"document_id": document.id, "spy_seat": spy_seat, "degrade_seed": degrade_seed}
        observations, _ = env.reset(seed=game_seed, options=options)
        performances: list[str | None] = []
        for s, agent in enumerate(env.possible_agents):
            if kind == "spy" and s == spy_seat:
                performances.append(None)
                continue
            performer = HeuristicAgent(seed=game_seed + s, n_numbers=n_numbers[s])
            performances.append(performer.act([observations[agent]])[0])
        games.append(
            {
                "game_seed": game_seed,
                "document_id": document.id,
                "document_sha256": _sha256(document.text),
                "spy_seat": spy_seat,
                "degrade_seed": degrade_seed,
                "spy_copy_sha256": _sha256(env.game.views[spy_seat]),
                "seat": seat,
                "performances": performances,
            }
        )
    return games


# The released sets' config keys are frozen: GameConfig fields renamed since are written under their v1 names.
_V1_NAMES = {"vote_gap_weight": "beta"}
_FROM_V1 = {v1: name for name, v1 in _V1_NAMES.items()}


def _set_payload(
    kind: str, config: GameConfig, games: list[dict[str, Any]], *, seed: int, source: Mapping[str, Any]
) -> dict[str, Any]:
    """A set's JSON object: what it is, the documents it was built on (``source``), how, and its games."""
    skipped = {"corpus", "max_documents"}
    game_fields = {_V1_NAMES.get(k, k): v for k, v in config.to_dict().items() if k not in skipped}
    return {
        "name": kind,
        "version": VERSION,
        "description": _DESCRIPTIONS[kind],
        **source,
        "reference": {
            "performers": "heuristic, 2-4 salient numbers per seat (drawn per game), seed game_seed + seat",
            "detectors": "heuristic, seed game_seed" if kind == "spy" else None,
        },
        "build": {"num_games": len(games), "seed": seed},
        "config": game_fields,
        "games": games,
    }


_DESCRIPTIONS = {
    "detect": "Read a fixed game from a civilian's seat and vote for the spy; score: detection accuracy.",
    "spy": "Hold the spy seat (perform on the degraded copy) against fixed heuristic detectors; "
    "the spy's vote is fixed to N/A; score: survival rate.",
}


# ------------------------------------------------------------------------- load
def load_set(kind: str, path: str | os.PathLike | None = None) -> tuple[LeaderboardSet, list[Document]]:
    """A released set and the documents its games use (checked against the recorded hashes)."""
    _check_kind(kind)
    where = path or set_path(kind)
    text = Path(where).read_text(encoding="utf-8")
    raw = parse_json(text, f"leaderboard set {str(where)!r}")
    if raw.get("name") != kind:
        raise ValueError(f"{where} is a {raw.get('name')!r} set, not {kind!r}")
    fields = {_FROM_V1.get(k, k): v for k, v in raw["config"].items()}
    config = GameConfig.from_dict({**fields, "corpus": raw["heldout"]["corpus"]})
    board, documents = _read_board(kind, raw, text, config, heldout_documents(config, raw["heldout"]["fraction"]))
    released = RELEASED_SHA256.get(board.name)
    if released is None:
        raise ValueError(f"{where}: {board.name} is not a released set ({sorted(RELEASED_SHA256)})")
    if board.sha256 != released:
        raise ValueError(
            f"{where} is not the released {board.name}: its sha256 {board.sha256[:16]}... differs "
            f"from {released[:16]}... (games or stored performances were changed); rebuild it with "
            "`spyrl leaderboard build`, or give a different set a new version"
        )
    return board, documents


def _read_board(
    kind: str, raw: Mapping[str, Any], text: str, config: GameConfig, documents: Sequence[Document], **fields: Any
) -> tuple[LeaderboardSet, list[Document]]:
    """The set of the JSON ``raw`` (its ``text``) over ``documents``, and the documents its games use; a game
    whose document is missing or changed is an error. ``fields``: the set's ``split`` and ``preregistration``."""
    by_id = {d.id: d for d in documents}
    games = tuple(LeaderboardGame(**{**g, "performances": tuple(g["performances"])}) for g in raw["games"])
    board = LeaderboardSet(kind, int(raw["version"]), config, games, _sha256(text), **fields)
    for game in games:
        document = by_id.get(game.document_id)
        if document is None or _sha256(document.text) != game.document_sha256:
            raise ValueError(
                f"leaderboard set {board.name}: document {game.document_id!r} is missing from the documents it was "
                "built on or its text changed; the set no longer matches this corpus"
            )
    return board, [by_id[i] for i in sorted({g.document_id for g in games})]


def confirm_set(
    kind: str, preregistration: str | os.PathLike, *, path: str | os.PathLike | None = None
) -> tuple[LeaderboardSet, list[Document]]:
    """The ``kind`` games of the sealed confirm split (:func:`spy_env.confirm.open_confirm`: only for a
    committed pre-registration; ``path``, its documents file), built exactly as :func:`build_set` builds a
    released set from the held-out documents (default config, seed 0, :data:`NUM_GAMES` games, the same
    reference players). The set is ``confirm-<kind>``; its sha256 is its built text's, and it carries the
    pre-registration's path and commit."""
    _check_kind(kind)
    config = GameConfig()
    filt = CorpusFilter(truncate=config.limits.max_document_chars)
    registered, documents = open_confirm(preregistration, path=path, filt=filt)
    text = build_set(kind, config=config, documents=documents)
    raw = parse_json(text, f"confirm-{kind} set")
    return _read_board(kind, raw, text, config, documents, split="confirm", preregistration=registered.record())


# -------------------------------------------------------------------------- run
def _start(
    board: LeaderboardSet, documents: Sequence[Document], games: Sequence[LeaderboardGame]
) -> list[tuple[Any, dict]]:
    """An env per game, reset to its setup; returns ``(env, perform-stage observations)``."""
    config = replace(board.config, corpus=tuple(documents), max_documents=None)
    started = []
    for game in games:
        env = parallel_env(config)
        observations, _ = env.reset(seed=game.game_seed, options=game.options())
        if _sha256(env.game.views[game.spy_seat]) != game.spy_copy_sha256:
            raise ValueError(
                f"leaderboard set {board.name}: the spy's copy of game {game.game_seed} differs from the one recorded "
                "(the degradation operator changed); rebuild the set under a new version"
            )
        started.append((env, observations))
    return started


def _score_detect(
    policy: Policy, board: LeaderboardSet, documents: Sequence[Document], games: Sequence[LeaderboardGame]
):
    started = _start(board, documents, games)
    vote_observations = []
    for (env, _), game in zip(started, games, strict=True):
        observations, *_ = env.step(dict(zip(env.possible_agents, game.performances, strict=True)))
        vote_observations.append(observations[env.possible_agents[game.seat]])
    actions = call_policy(policy, vote_observations)
    items = []
    for (env, _), game, action, observation in zip(started, games, actions, vote_observations, strict=True):
        voter = env.possible_agents[game.seat]
        replies = {agent: ABSTAIN for agent in env.agents}
        replies[voter] = action.text
        _, _, _, _, infos = env.step(replies)
        vote = infos[voter]["vote"]
        legal = [int(s) for s in np.flatnonzero(observation["vote_targets"])]
        items.append(
            {
                **_item_head(game),
                "vote": -1 if vote is None else int(vote),
                "detection_accuracy": float(vote == game.spy_seat),
                "expected_accuracy": _expected(action, game.spy_seat),
                "chance": 1 / len(legal),
                "na_rate": float(vote is None),
                "valid_vote_rate": float(not infos[voter]["violations"]),
                "violations": list(infos[voter]["violations"]),
                "error": safe_reason(action.error),
                "completion": action.text,
            }
        )
    return items


def _score_spy(
    policy: Policy,
    board: LeaderboardSet,
    documents: Sequence[Document],
    games: Sequence[LeaderboardGame],
    detector: Policy | None = None,
):
    started = _start(board, documents, games)
    actions = call_policy(
        policy, [obs[env.possible_agents[g.seat]] for (env, obs), g in zip(started, games, strict=True)]
    )
    stepped = []
    for (env, _), game, action in zip(started, games, actions, strict=True):
        spy = env.possible_agents[game.seat]
        texts = dict(zip(env.possible_agents, game.performances, strict=True))
        texts[spy] = action.text
        observations, _, _, _, infos = env.step(texts)
        stepped.append((observations, list(infos[spy]["violations"])))
    replies = _detector_votes(detector, started, games, [observations for observations, _ in stepped])
    items = []
    for (env, _), game, action, (_, perform_violations), votes in zip(
        started, games, actions, stepped, replies, strict=True
    ):
        spy = env.possible_agents[game.seat]
        texts = {agent: _text(reply) for agent, reply in votes.items()}
        _, _, _, _, infos = env.step({**texts, spy: ABSTAIN})
        truth = infos[spy]["truth"]
        panel = {}
        if detector is not None:
            expected = [_expected(reply, game.spy_seat) for reply in votes.values()]
            panel = {
                "expected_votes_against_share": float(np.mean(expected)),
                "votes": [_text(v) for v in votes.values()],
            }
        items.append(
            {
                **_item_head(game),
                "votes_against": int(truth["votes_received"][0][game.spy_seat]),
                "survival_rate": float(not truth["spy_caught"]),
                "clean_survival_rate": _clean_survival(not truth["spy_caught"], perform_violations),
                "votes_against_share": truth["votes_received"][0][game.spy_seat] / len(votes),
                **panel,
                "no_answer_rate": float("no_answer" in perform_violations),
                "valid_performance_rate": float(not perform_violations),
                "violations": perform_violations,
                "error": safe_reason(action.error),
                "completion": action.text,
            }
        )
    return items


def _detector_votes(
    detector: Policy | None,
    started: Sequence[tuple[Any, dict]],
    games: Sequence[LeaderboardGame],
    observations: list[dict],
) -> list[dict[str, Action | str]]:
    """Each game's civilian votes: fixed heuristic detectors seeded per game, or one ``detector`` policy's
    votes from every civilian seat (played in one batch)."""
    from agents.scripted import HeuristicAgent

    seats = [
        [a for a in env.agents if a != env.possible_agents[g.seat]] for (env, _), g in zip(started, games, strict=True)
    ]
    if detector is None:  # fixed and seeded per game: order-independent
        return [
            dict(zip(agents, HeuristicAgent(seed=g.game_seed).act([obs[a] for a in agents]), strict=True))
            for agents, g, obs in zip(seats, games, observations, strict=True)
        ]
    flat = call_policy(detector, [obs[a] for agents, obs in zip(seats, observations, strict=True) for a in agents])
    out, at = [], 0
    for agents in seats:
        out.append(dict(zip(agents, flat[at : at + len(agents)], strict=True)))
        at += len(agents)
    return out


def _text(reply: Action | str) -> str:
    return reply.text if isinstance(reply, Action) else reply


def _item_head(game: LeaderboardGame) -> dict[str, Any]:
    return {"game_seed": game.game_seed, "document_id": game.document_id, "spy_seat": game.spy_seat, "seat": game.seat}


def _expected(action: Action, spy_seat: int) -> float:
    """The probability the voter gave the spy at its choice step (NaN when unknown)."""
    if not action.vote_distribution:
        return float("nan")
    return float(action.vote_distribution.get(str(spy_seat + 1), 0.0))


def run_leaderboard(
    kind: str,
    policy: Policy,
    *,
    model: str = "",
    limit: int | None = None,
    path: str | os.PathLike | None = None,
    detector: Policy | None = None,
    confirm: str | os.PathLike | None = None,
    look: Look | None = None,
) -> dict[str, Any]:
    """Score ``policy`` on a set; returns results in ``spyrl eval``'s JSON format.

    ``detector`` (spy sets only): a policy that casts every civilian's vote in place of the set's
    fixed heuristic detectors (e.g. a panel of a base model's votes); when it reports its vote
    distribution, ``expected_votes_against_share`` is the mean probability the civilians put on the spy.

    The set is the released ``<kind>-v<version>`` (``path``: its file, default the shipped one), or, with
    ``confirm`` (a pre-registration file), ``confirm-<kind>``: the sealed split's games (:func:`confirm_set`;
    ``path``: its documents file), scored only when the plan is committed; its path and commit are then
    recorded in the results (``preregistration``) and the ledger.

    ``results["<set>"]`` has ``n``, ``k`` (1), ``accuracy`` (the headline score:
    detection accuracy or survival rate), ``interval`` (its bootstrap 95% interval), every metric
    with its interval under ``metrics``, and one record per game under ``items``. ``limit`` plays
    the first ``limit`` games (a prefix of the set, so short runs are comparable to each other).
    ``decoding`` and ``seed`` are left for the caller to record (``spyrl leaderboard`` records its flags).
    The scoring is a look in the evaluation ledger, recorded as ``look`` says (default: ``model``, the
    default ledger).
    """
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be >= 1, got {limit}")
    if detector is not None and kind != "spy":
        raise ValueError("a detector replaces the civilians' votes of a spy set; detect sets have none")
    look, name = look or Look(), model or policy_name(policy)
    look.check(name)  # before the work: a ledger that cannot be written is refused now
    board, documents = confirm_set(kind, confirm, path=path) if confirm is not None else load_set(kind, path)
    games = board.games[:limit]
    if kind == "detect":
        items = _score_detect(policy, board, documents, games)
    else:
        items = _score_spy(policy, board, documents, games, detector)
    names = METRICS[kind] + (("expected_votes_against_share",) if detector is not None else ())
    metrics: dict[str, Interval] = {m: bootstrap([item[m] for item in items]) for m in names}
    score = METRICS[kind][0]
    look.record(board.name, board.sha256, name, headline(score, **metrics[score].to_dict()), board.preregistration)
    return {
        "model": name,
        "decoding": {},  # the caller's sampling settings and seed (spyrl leaderboard records its flags)
        "protocol": _protocol(board, detector),
        "seed": None,
        "limit": limit,
        "preregistration": board.preregistration,
        "results": {board.name: _set_result(items, metrics, score)},
    }


def _set_result(items: list[dict[str, Any]], metrics: Mapping[str, Interval], score: str) -> dict[str, Any]:
    """One set's results: the headline ``score`` as ``accuracy`` with its interval, every metric, the items."""
    return {
        "n": len(items),
        "k": 1,
        "accuracy": metrics[score].mean,
        "interval": metrics[score].to_dict(),
        "metrics": {m: interval.to_dict() for m, interval in metrics.items()},
        "forfeits": sum(bool(item["error"]) for item in items),
        "items": items,
    }


def _protocol(board: LeaderboardSet, detector: Policy | None) -> dict[str, Any]:
    """What a result's numbers mean: the set, its score and secondary scores, the interval, the detector."""
    return {
        "set": board.name,
        "score": METRICS[board.kind][0],
        "set_sha256": board.sha256,
        "interval": "bootstrap percentile 95% over games (2000 resamples, seed 0)",
        "description": _DESCRIPTIONS[board.kind],
        **({"secondary": SECONDARY[board.kind]} if board.kind in SECONDARY else {}),
        **({"detector": policy_name(detector)} if detector is not None else {}),
    }


def leaderboard_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: one row per results file, set and score: the headline score with its interval, then the
    set's :data:`SECONDARY` scores (spy sets: ``clean_survival_rate``, derived from the items' survival and
    violations for files written before it was recorded).

    ``forfeits`` counts games whose call failed (a dead server): they score as misses, so a row
    with many forfeits measures the backend, not the model. ``vs first`` is the paired difference
    from the first file's score on the same set (bootstrap over games), shown when both played
    the same games (same documents and seeds, in order); ``—`` otherwise.
    """
    lines = [
        "| model | set | score | mean [95% CI] | n | forfeits | vs first, paired [95% CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    for index, run in enumerate(runs):
        for name, r in run["results"].items():
            if "interval" not in r:
                continue
            try:
                i = Interval(**r["interval"])
            except TypeError as e:
                raise ValueError(f"results of {run.get('model')!r} on {name!r}: a malformed interval ({e})") from e
            main_score = run.get("protocol", {}).get("score", "accuracy")
            for score in (main_score, *SECONDARY.get(name.removeprefix("confirm-").split("-v")[0], {})):
                shown = i if score == main_score else _score_interval(r, score)
                if shown is None:
                    continue
                paired = _paired(r, runs[0]["results"].get(name), score) if index else None
                vs = "—" if paired is None else f"{paired.mean:+.3f} [{paired.low:+.3f}, {paired.high:+.3f}]"
                lines.append(
                    f"| {run['model']} | {name} | {score} | {shown} | {r['n']} | {r.get('forfeits', 0)} | {vs} |"
                )
    return "\n".join(lines)


def item_score(item: Mapping[str, Any], score: str) -> float | None:
    """One game's ``score``; ``clean_survival_rate`` derived from ``survival_rate`` and ``violations`` where
    the item predates it; None when the item cannot give it. A malformed item (not a mapping, a score that is
    not a number) raises ``ValueError``: result files are read from users.

    >>> item_score({"survival_rate": 1.0, "violations": ["verbatim_copy"]}, "clean_survival_rate")
    0.0
    """
    if not isinstance(item, Mapping):
        raise ValueError(f"a result item must be a mapping, got {type(item).__name__}")
    derived = score == "clean_survival_rate" and score not in item and "violations" in item
    key = "survival_rate" if derived else score
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"a result item's {key} must be a finite number, got {value!r:.40}")
    return _clean_survival(bool(value), item["violations"]) if derived else float(value)


def _clean_survival(survived: bool, violations: Sequence[str]) -> float:
    """1.0 when the spy survived with a performance that broke no rule of the game."""
    return float(survived and not violations)


def _items(result: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """A result's per-game items, each a mapping (``ValueError`` otherwise: result files are read from users)."""
    items = list((result or {}).get("items") or [])
    if not all(isinstance(item, Mapping) for item in items):
        raise ValueError("a result's items must be mappings, one per game")
    return items


def _score_interval(result: Mapping[str, Any], score: str) -> Interval | None:
    values = [item_score(item, score) for item in _items(result)]
    if not values or None in values:
        return None
    return bootstrap(values)


def _paired(result: Mapping[str, Any], first: Mapping[str, Any] | None, score: str) -> Interval | None:
    """``result`` − ``first`` on the same games, or None when they did not play the same games."""
    items, base = _items(result), _items(first)
    same = len(items) == len(base) > 0 and all(
        (a.get("document_id"), a.get("game_seed"), a.get("seat"))
        == (b.get("document_id"), b.get("game_seed"), b.get("seat"))
        for a, b in zip(items, base, strict=True)
    )
    scores = [(item_score(a, score), item_score(b, score)) for a, b in zip(items, base, strict=True)] if same else []
    if not scores or any(a is None or b is None for a, b in scores):
        return None
    return bootstrap([a - b for a, b in scores])


def write_set(kind: str, out: str | os.PathLike | None = None, **kwargs: Any) -> Path:
    """Build a set and write it (default: the shipped file)."""
    return write_text(out or set_path(kind), build_set(kind, **kwargs))
