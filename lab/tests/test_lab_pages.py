"""The lab's pages state how many looks each evaluation set has had, and the ledger agrees."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from spy_env.ledger import looks, read_ledger

ROOT = Path(__file__).resolve().parents[2]
LEDGER = ROOT / "lab" / "ledger.jsonl"
PAGES = ["lab/README.md", "lab/RESULTS.md", "lab/results/selfplay.md"]
SENTENCE = re.compile(r"spy-v1 (\d+), detect-v1 (\d+), held-out documents (\d+), confirm (\d+)\.")


def _counts() -> dict[str, int]:
    counted = looks(read_ledger(LEDGER))
    return {name: counted.get(name, 0) for name in ("spy-v1", "detect-v1", "heldout", "confirm")}


@pytest.mark.parametrize("page", PAGES[1:])
def test_a_results_page_states_the_looks_the_ledger_counts(page):
    stated = SENTENCE.findall((ROOT / page).read_text(encoding="utf-8"))
    assert stated, f"{page} does not say how many looks its sets have had"
    assert [int(n) for n in stated[0]] == list(_counts().values()), f"{page}: update its looks from the ledger"


def test_the_lab_index_table_counts_the_looks_the_ledger_holds():
    text = (ROOT / "lab" / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (spy-v1|detect-v1|held-out documents|confirm)\b[^|]* \| (\d+) \|", text, re.M))
    names = {"spy-v1": "spy-v1", "detect-v1": "detect-v1", "held-out documents": "heldout", "confirm": "confirm"}
    assert {names[k]: int(v) for k, v in rows.items()} == _counts()


def test_the_sealed_split_has_had_no_look_without_a_preregistration():
    for entry in read_ledger(LEDGER):
        if entry["set"].startswith("confirm"):
            assert entry.get("preregistration"), f"a look at {entry['set']} without a pre-registration: {entry}"


def test_the_backfilled_looks_name_committed_results():
    for entry in read_ledger(LEDGER):
        if "backfilled" in entry:
            assert (ROOT / entry["backfilled"]).is_file(), entry["backfilled"]


def test_the_lab_scripts_record_their_looks_in_the_lab_ledger(monkeypatch):
    """Importing the experiments' harness points an unset SPYRL_LEDGER at lab/ledger.jsonl, and leaves a set one."""
    import subprocess
    import sys

    monkeypatch.delenv("SPYRL_LEDGER", raising=False)
    code = "import harness, os; print(os.environ['SPYRL_LEDGER'])"
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT / "lab" / "experiments", capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == str(LEDGER)
    monkeypatch.setenv("SPYRL_LEDGER", "/elsewhere/ledger.jsonl")
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT / "lab" / "experiments", capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == "/elsewhere/ledger.jsonl"


def test_the_backfilled_looks_are_what_the_backfill_script_reads_from_the_committed_results():
    """lab/experiments/backfill_ledger.py, without git's dates, gives the ledger's backfilled lines (as a multiset)."""
    from collections import Counter

    from tests.helpers import experiment_module

    def key(entry):
        return json.dumps({k: v for k, v in entry.items() if k != "time"}, sort_keys=True)

    read = experiment_module("backfill_ledger").entries(dated=False)
    kept = [e for e in read_ledger(LEDGER) if "backfilled" in e]
    assert len(read) > 300 and Counter(map(key, read)) == Counter(map(key, kept))
