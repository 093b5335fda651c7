"""The command line as commands: one module per command under ``spyrl/commands/``, and help texts and
choices read from the registries (presets, agent backends, degradations, leaderboard sets), so that
what ``--help`` lists is what the process can run. An entry registered from outside (a preset, a
backend, a degradation) appears in the help with no edit to the command line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import agents
from agents.registry import BACKENDS, some_argument
from spy_env.degrade import DEGRADERS, Degraded, register_degrader
from spyrl.commands import COMMANDS, build_parser, main
from spyrl.evaluation.leaderboard import DOCUMENTS, KINDS
from trainers.presets import PRESETS

ROOT = Path(__file__).resolve().parents[1]


def help_of(command: str | None, capsys, monkeypatch) -> str:
    """``spyrl [COMMAND] --help``, unwrapped (one line per option)."""
    monkeypatch.setenv("COLUMNS", "10000")
    with pytest.raises(SystemExit) as stopped:
        main([*([command] if command else []), "--help"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


def option_help(text: str, option: str) -> str:
    """The help text of ``option`` in a ``--help`` output."""
    found = re.search(rf"^  {re.escape(option)}(?: \S+)?  +(.*)$", text, re.MULTILINE)
    assert found, f"{option} not in the help:\n{text}"
    return found.group(1)


def listed_names(text: str) -> list[str]:
    """``"a, b or c"`` (or ``"a, b, c"``) as ``["a", "b", "c"]``."""
    return re.split(r", | or ", text)


def test_every_command_is_a_module_of_its_own():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    assert list(sub.choices) == list(COMMANDS)
    modules = {p.stem for p in (ROOT / "spyrl" / "commands").glob("*.py")}
    for name, module in COMMANDS.items():
        assert name in modules and Path(module.__file__) == ROOT / "spyrl" / "commands" / f"{name}.py"
        assert sub.choices[name].get_default("func") is module.run
    assert not (ROOT / "spyrl" / "cli.py").exists()


def test_the_presets_listed_are_the_registered_ones(capsys, monkeypatch):
    text = help_of("train", capsys, monkeypatch)
    assert listed_names(option_help(text, "--preset")) == sorted(PRESETS)
    assert f"(presets: {', '.join(sorted(PRESETS))})" in help_of(None, capsys, monkeypatch)
    # a preset added to the registry is listed and accepted, with no edit to the command line
    monkeypatch.setitem(PRESETS, "toy-preset", {"run": {"iterations": 3}})
    assert "toy-preset" in listed_names(option_help(help_of("train", capsys, monkeypatch), "--preset"))
    assert main(["train", "--preset", "toy-preset", "--print-config"]) == 0
    assert "iterations: 3" in capsys.readouterr().out


def agent_forms(capsys, monkeypatch) -> dict[str, list[str]]:
    """The agent specs each command's ``--agent`` / ``--agents`` help lists."""
    play = option_help(help_of("play", capsys, monkeypatch), "--agent")
    play = play.removeprefix("agent spec for every seat: ").removesuffix(
        " (auto: smollm2 when installed, else heuristic)"
    )
    forms = {"play": listed_names(play)}
    for command in ("tournament", "baselines"):
        text = option_help(help_of(command, capsys, monkeypatch), "--agents")
        forms[command] = listed_names(text.removeprefix("comma-separated agent specs: "))
    return forms


def test_the_agents_listed_are_the_registered_backends(capsys, monkeypatch):
    expected = [backend.spec for backend in BACKENDS.values()]
    assert agent_forms(capsys, monkeypatch) == {"play": expected, "tournament": expected, "baselines": expected}
    agents.register_backend("toy", spec="toy:WORD", help="says WORD", accepts=some_argument)(lambda *a, **k: None)
    try:
        forms = agent_forms(capsys, monkeypatch)
    finally:
        del BACKENDS["toy"]
    assert {command: listed[-1] for command, listed in forms.items()} == dict.fromkeys(forms, "toy:WORD")


def degradations_listed(capsys, monkeypatch) -> dict[str, list[str]]:
    """The operators each command's ``--degrade`` offers."""
    play = help_of("play", capsys, monkeypatch)
    choices = re.search(r"--degrade \{([^}]*)\}", play)
    baselines = option_help(help_of("baselines", capsys, monkeypatch), "--degrade")
    serve = option_help(help_of("serve", capsys, monkeypatch), "--degrade")
    return {
        "play": choices.group(1).split(","),
        "baselines": listed_names(baselines.removeprefix("'all' or a comma-separated list of ")),
        "serve": listed_names(serve.removeprefix("degradation operator: ").removesuffix(" (default: the task's)")),
    }


def test_the_degradations_listed_are_the_registered_ones(capsys, monkeypatch):
    expected = sorted(DEGRADERS)
    assert degradations_listed(capsys, monkeypatch) == dict.fromkeys(("play", "baselines", "serve"), expected)

    @register_degrader("toy_blank")
    def toy_blank(text, rng, ctx):
        return Degraded("", (), "toy_blank")

    try:
        listed = degradations_listed(capsys, monkeypatch)
    finally:
        del DEGRADERS["toy_blank"]
    assert listed == dict.fromkeys(("play", "baselines", "serve"), sorted([*expected, "toy_blank"]))


def test_the_leaderboard_offers_its_sets_and_document_splits(capsys, monkeypatch):
    text = help_of("leaderboard", capsys, monkeypatch)
    sets = re.search(r"^  \{([^}]*)\}  +the set to run", text, re.MULTILINE)
    assert sets.group(1).split(",") == [*KINDS, "build"]
    assert re.search(r"--documents \{([^}]*)\}", text).group(1).split(",") == list(DOCUMENTS)
