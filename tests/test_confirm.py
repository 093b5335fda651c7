"""The sealed confirm split: loaded only under a pre-registration committed to git (checked in real temporary
repositories), never offered for training or play, scored as confirm-detect / confirm-spy with the plan's commit
in the results and the ledger."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

import agents
from spy_env import confirm as confirm_module
from spy_env.config import GameConfig
from spy_env.confirm import CONFIRM_FILE, check_preregistration, confirm_documents, confirm_path
from spy_env.corpus import DOCUMENT_SPLITS, CorpusFilter, load_embedded
from spy_env.ledger import read_ledger
from spyrl.commands import main
from spyrl.evaluation.leaderboard import build_set, confirm_set, run_leaderboard

pytestmark = pytest.mark.skipif(subprocess.run(["git", "--version"], capture_output=True).returncode, reason="no git")

PLAN = {
    "recipe": "cpu-smoke, lr 1e-6",
    "seeds": [0, 1, 2],
    "primary_metric": "detection_accuracy",
    "test": "paired bootstrap over games, one-sided",
    "alpha": 0.05,
    "hypothesis": "the trained model detects the spy more often than the base model",
}


def git(repo: Path, *args: str, **env: str) -> str:
    identity = ["-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"]
    proc = subprocess.run(
        ["git", *identity, *args], cwd=repo, capture_output=True, text=True, check=True, env={**os.environ, **env}
    )
    return proc.stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """An empty git repository; git looks for no repository above ``tmp_path``."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q")
    return path


def committed_plan(repo: Path, plan: dict | None = None, name: str = "plans/confirm.json") -> Path:
    path = repo / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan or PLAN, indent=1))
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", "pre-register the confirmatory run")
    return path


@pytest.fixture
def confirm_file(tmp_path) -> Path:
    """A small confirm split in ``corpus.jsonl``'s schema: arithmetic lessons with numbers to find."""
    rows = []
    for i in range(6):
        a, b, c, d = 7 + i, 12 + 3 * i, 25 + 11 * i, 9 + 5 * i
        text = (
            f"# Pencils in shop {i + 1}\n\nA shop has {a} boxes with {b} pencils in each box. It sells {c} pencils on "
            f"Monday and {d} pencils on Tuesday. How many pencils are left?\n\nFirst count the pencils: {a} × {b} = "
            f"{a * b}. Then count the pencils sold: {c} + {d} = {c + d}. The pencils left are {a * b} − {c + d} = "
            f"{a * b - c - d}, so the answer is $\\boxed{{{a * b - c - d}}}$."
        )
        rows.append({"id": f"confirm-fixture-{i}", "text": text, "metadata": {"category": "arithmetic-word-problems"}})
    path = tmp_path / "confirm.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# ----------------------------------------------------------------- the pre-registration
def test_a_committed_preregistration_is_accepted_with_its_commit(repo):
    path = committed_plan(repo)
    registered = check_preregistration(path)
    assert registered.commit == git(repo, "rev-parse", "HEAD") and len(registered.commit) == 40
    assert registered.record() == {"path": "plans/confirm.json", "commit": registered.commit}
    assert registered.seeds == (0, 1, 2) and registered.alpha == 0.05 and registered.sets is None
    assert registered.primary_metric == "detection_accuracy" and registered.hypothesis == PLAN["hypothesis"]


def test_refused_outside_a_git_repository(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    (tmp_path / "loose").mkdir()
    path = tmp_path / "loose" / "plan.json"
    path.write_text(json.dumps(PLAN))
    with pytest.raises(ValueError, match="is not in a git repository"):
        check_preregistration(path)


def test_refused_when_missing(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        check_preregistration(tmp_path / "plan.json")


def test_refused_when_untracked_or_only_staged(repo):
    committed_plan(repo, name="other.json")  # the repository has a commit, the plan none
    path = repo / "plan.json"
    path.write_text(json.dumps(PLAN))
    with pytest.raises(ValueError, match="not committed: git does not track it"):
        check_preregistration(path)
    git(repo, "add", "plan.json")
    with pytest.raises(ValueError, match="not committed: it is staged but has no commit yet"):
        check_preregistration(path)


def test_refused_when_modified_since_its_commit(repo):
    path = committed_plan(repo)
    path.write_text(json.dumps({**PLAN, "alpha": 0.1}))  # the plan moved after the data were seen
    with pytest.raises(ValueError, match="was modified since its commit"):
        check_preregistration(path)
    git(repo, "add", "plans/confirm.json")  # staged is not committed either
    with pytest.raises(ValueError, match="was modified since its commit"):
        check_preregistration(path)
    git(repo, "commit", "-q", "-m", "amend the plan")
    assert check_preregistration(path).alpha == 0.1  # a new commit is a new pre-registration


def test_refused_when_its_commit_is_dated_in_the_future(repo):
    path = repo / "plan.json"
    path.write_text(json.dumps(PLAN))
    git(repo, "add", "plan.json")
    future = "2099-01-01T00:00:00+0000"
    git(repo, "commit", "-q", "-m", "plan", GIT_COMMITTER_DATE=future, GIT_AUTHOR_DATE=future)
    with pytest.raises(ValueError, match="dated in the future"):
        check_preregistration(path)


@pytest.mark.parametrize("field", ["recipe", "seeds", "primary_metric", "test", "alpha"])
def test_refused_when_a_required_field_is_missing(repo, field):
    path = committed_plan(repo, {k: v for k, v in PLAN.items() if k != field})
    with pytest.raises(ValueError, match=f"missing the field '{field}'"):
        check_preregistration(path)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"alpha": 0.5}, "'alpha' must be a number in"),
        ({"alpha": 0}, "'alpha' must be a number in"),
        ({"alpha": True}, "'alpha' must be a number in"),
        ({"seeds": []}, "'seeds' must be a non-empty list of integers"),
        ({"seeds": [1, "2"]}, "'seeds' must be a non-empty list of integers"),
        ({"recipe": "  "}, "'recipe' must be a non-empty string"),
        ({"test": 3}, "'test' must be a non-empty string"),
        ({"sets": "confirm-detect"}, "'sets' must be a list of strings"),
        ({"primary_metrics": "x"}, "unknown fields \\['primary_metrics'\\]"),
    ],
)
def test_refused_when_a_field_is_invalid(repo, change, message):
    path = committed_plan(repo, {**PLAN, **change})
    with pytest.raises(ValueError, match=message):
        check_preregistration(path)


def test_refused_when_not_a_json_object(repo):
    path = repo / "plan.json"
    path.write_text("recipe: cpu-smoke\n")
    git(repo, "add", "plan.json")
    git(repo, "commit", "-q", "-m", "plan")
    with pytest.raises(ValueError, match="is not JSON"):
        check_preregistration(path)


# ------------------------------------------------------------------------ the split
def test_the_documents_load_only_under_a_committed_preregistration(repo, confirm_file):
    plan = committed_plan(repo)
    documents = confirm_documents(plan, path=confirm_file)
    assert [d.id for d in documents] == [f"confirm-fixture-{i}" for i in range(6)]
    plan.write_text(json.dumps({**PLAN, "seeds": [0]}))
    with pytest.raises(ValueError, match="modified since its commit"):
        confirm_documents(plan, path=confirm_file)


def test_the_split_is_never_a_training_or_play_choice(capsys):
    assert "confirm" not in DOCUMENT_SPLITS  # play, rollout, tournament and eval --game offer these
    with pytest.raises(SystemExit) as exit_info:
        main(["play", "--documents", "confirm"])
    assert exit_info.value.code == 2 and "invalid choice: 'confirm'" in capsys.readouterr().err


def test_the_shipped_split_is_apart_from_the_corpus(repo):
    if not confirm_path().is_file():
        pytest.skip(f"spy_env/data/{CONFIRM_FILE} is not written yet")
    documents = confirm_documents(committed_plan(repo))
    embedded = load_embedded(CorpusFilter(min_length=0))
    assert len(documents) == 30 and len({d.id for d in documents}) == 30
    assert not {d.id for d in documents} & {d.id for d in embedded}
    assert not {d.text for d in documents} & {d.text for d in embedded}


# --------------------------------------------------------------------------- scoring
def test_the_confirm_set_is_built_as_the_released_sets_are(repo, confirm_file):
    plan = committed_plan(repo)
    board, used = confirm_set("detect", plan, path=confirm_file)
    documents = confirm_documents(
        plan, path=confirm_file, filt=CorpusFilter(truncate=GameConfig().limits.max_document_chars)
    )
    text = build_set("detect", config=GameConfig(), documents=documents)
    assert board.name == "confirm-detect" and len(board.games) == 100 and board.config == GameConfig()
    assert board.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert {g.document_id for g in board.games} == {d.id for d in used} == {d.id for d in documents}
    assert board.preregistration == {"path": "plans/confirm.json", "commit": git(repo, "rev-parse", "HEAD")}
    assert json.loads(text)["documents"] == {"count": 6}
    plan.write_text(json.dumps({**PLAN, "alpha": 0.01}))
    with pytest.raises(ValueError, match="modified since its commit"):
        run_leaderboard("detect", agents.load("heuristic"), confirm=plan, path=confirm_file)


def test_a_confirm_run_writes_results_and_a_ledger_line_with_the_commit(
    repo, confirm_file, tmp_path, ledger_file, monkeypatch, capsys
):
    monkeypatch.setattr(confirm_module, "confirm_path", lambda: confirm_file)
    plan = committed_plan(repo)
    out = tmp_path / "confirm.json"
    argv = ["leaderboard", "spy", "--model", "heuristic", "--documents", "confirm", "--preregistration", str(plan),
            "--limit", "4", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert "| heuristic | confirm-spy | survival_rate |" in capsys.readouterr().out
    commit = git(repo, "rev-parse", "HEAD")
    results = json.loads(out.read_text())
    assert results["preregistration"] == {"path": "plans/confirm.json", "commit": commit}
    assert results["protocol"]["set"] == "confirm-spy" and results["results"]["confirm-spy"]["n"] == 4
    [look] = read_ledger(ledger_file)
    assert look["set"] == "confirm-spy" and look["preregistration"] == results["preregistration"]
    assert look["set_sha256"] == results["protocol"]["set_sha256"] and look["command"] == ["spyrl", *argv]


@pytest.mark.parametrize("plan_state", ["none", "uncommitted", "modified", "missing field", "without confirm"])
def test_the_cli_refuses_a_confirm_run_without_a_committed_plan_in_one_line(
    repo, confirm_file, tmp_path, ledger_file, monkeypatch, capsys, plan_state
):
    monkeypatch.setattr(confirm_module, "confirm_path", lambda: confirm_file)
    argv = [
        "leaderboard",
        "detect",
        "--model",
        "heuristic",
        "--documents",
        "confirm",
        "--out",
        str(tmp_path / "r.json"),
    ]
    if plan_state == "uncommitted":
        (repo / "plan.json").write_text(json.dumps(PLAN))
        argv += ["--preregistration", str(repo / "plan.json")]
    elif plan_state == "modified":
        plan = committed_plan(repo)
        plan.write_text(json.dumps({**PLAN, "alpha": 0.2}))
        argv += ["--preregistration", str(plan)]
    elif plan_state == "missing field":
        argv += ["--preregistration", str(committed_plan(repo, {k: v for k, v in PLAN.items() if k != "test"}))]
    elif plan_state == "without confirm":  # a plan is for the confirm split, not a released set
        argv = [*argv[:4], "--out", str(tmp_path / "r.json"), "--preregistration", str(committed_plan(repo))]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert not (tmp_path / "r.json").exists() and not ledger_file.exists()  # nothing scored, nothing written
