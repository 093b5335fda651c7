"""``spyrl view``: the HTML page of buffers, runs and tournaments, and what a real browser does with it.

The fixtures are real artefacts in their real schemas: buffers played by ``spy_env.runner.Runner``
(one seat held by a policy that writes hostile HTML), a run folder whose ``metrics.jsonl`` is
written by the trainer's own ``MetricSinks``, and a tournament saved by ``TournamentResult.save``.
Browser tests drive headless Chromium through selenium and skip, saying why, when either is missing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agents
from spy_env.buffer import EpisodeBuffer
from spy_env.config import GameConfig
from spy_env.metrics import game_metrics
from spy_env.policy import Action
from spy_env.runner import Runner
from spyrl.viewer import build_payload, embed_json, input_kind, write_page
from spyrl.viewer.payload import copy_spans, decode_logprobs, degradation_of

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "<script>window.__pwned=1</script>"
IMG = '<img src=x onerror="window.__pwned=1">'
LINK = '<a href="javascript:window.__pwned=1">click</a>'
HOSTILE = f"{SCRIPT} </td></tr></table> {IMG} {LINK} \u2028 & $\\boxed{{7}}$"
HOSTILE_ID = f"doc-{SCRIPT}"


class HostilePolicy:
    """Writes hostile HTML as its performance and its vote reasoning, with fake per-token log-probs."""

    name = f"hostile{IMG}"

    def act(self, observations):
        out = []
        for obs in observations:
            text = HOSTILE if obs["stage"] == 0 else f"{HOSTILE} <vote>1</vote>"
            n = len(text.split())
            out.append(Action(text=text, completion_token_ids=list(range(n)), logprobs=[-0.1 * i for i in range(n)]))
        return out


def _corpus(path: Path) -> Path:
    rows = [
        {
            "id": HOSTILE_ID,
            "text": f"Tom has 3 apples and buys 4 more. {IMG} He now has 7 apples. " * 3,
            "metadata": {},
        },
        {"id": "plain-doc", "text": "A train travels 60 km in 2 hours. Its speed is 30 km/h. " * 4, "metadata": {}},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory):
    """A hostile rollout buffer, a run folder and a tournament result, with their pages."""
    from spyrl.evaluation.tournament import run_tournament
    from trainers.sinks import MetricSinks

    root = tmp_path_factory.mktemp("viewer")
    config = GameConfig(n_players=4, corpus=str(_corpus(root / "corpus.jsonl")))
    heuristic = agents.load("heuristic")
    buffer = Runner(config).run([HostilePolicy(), heuristic, heuristic, heuristic], 8, seed=1)
    buffer.save(root / "hostile.parquet")

    run = root / "run"
    sinks = MetricSinks(run, ["jsonl"], {})
    runner = Runner(GameConfig(n_players=3), run_id="iter")
    for iteration, stage in enumerate(["detect", "detect", "perform"]):
        played = runner.run([heuristic, agents.load("random"), heuristic], 3, seed=iteration, policy_version=iteration)
        played.save(run / "buffers" / f"iter_{iteration:05d}.parquet")
        metrics = {f"env/{k}": v for k, v in game_metrics(played).items()}
        sinks.log({"iteration": iteration + 1, "stage": stage, **metrics, "losses/kl": 0.01 * iteration})
    sinks.log({"iteration": 4, "stage": "perform", "eval/detection_accuracy": 0.5, "eval/na_rate": float("nan")})

    tournament = root / "tournament"
    policies = {"heuristic": heuristic, "random": agents.load("random")}
    run_tournament(policies, 4, config=GameConfig(n_players=3), seed=0).save(tournament)

    pages = {}
    for name, source in (("buffer", root / "hostile.parquet"), ("run", run), ("tournament", tournament)):
        pages[name] = write_page(source, root / f"{name}.html")
    return {"root": root, "buffer": buffer, "pages": pages, "run": run, "tournament": tournament}


# ------------------------------------------------------------------------ structure
def test_input_kinds_and_user_mistakes(artefacts, tmp_path):
    assert input_kind(artefacts["root"] / "hostile.parquet") == "buffer"
    assert input_kind(artefacts["run"]) == "run"
    assert input_kind(artefacts["tournament"]) == "tournament"
    assert input_kind(artefacts["tournament"] / "summary.json") == "tournament"
    with pytest.raises(FileNotFoundError):
        input_kind(tmp_path / "missing.parquet")
    with pytest.raises(ValueError, match="neither a training run"):
        input_kind(tmp_path)
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ValueError, match="expected an episode buffer"):
        input_kind(tmp_path / "notes.txt")


def test_cli_writes_a_page_and_reports_mistakes_on_one_line(artefacts, tmp_path):
    def spyrl(*args):
        return subprocess.run(
            [sys.executable, "-m", "spyrl", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
        )

    out = tmp_path / "page.html"
    proc = spyrl("view", str(artefacts["root"] / "hostile.parquet"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    for bad in (tmp_path / "missing.parquet", tmp_path):
        proc = spyrl("view", str(bad), "-o", str(tmp_path / "x.html"))
        assert proc.returncode == 2
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "x.html").exists()


@pytest.mark.parametrize("kind", ["buffer", "run", "tournament"])
def test_pages_are_self_contained_and_offline(artefacts, kind):
    html = artefacts["pages"][kind].read_text(encoding="utf-8")
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:|//)""", html, re.I)
    assert not re.search(r"<link\b|@import|url\(", html, re.I)
    assert not re.search(r"<script[^>]+src", html, re.I)
    assert "default-src 'none'" in html  # the CSP forbids every network request
    assert html.count("<script") == 2 and html.count("</script>") == 2  # data and code; nothing injected


def test_hostile_text_is_escaped_in_the_page_and_kept_intact_in_the_data(artefacts):
    html = artefacts["pages"]["buffer"].read_text(encoding="utf-8")
    for needle in (SCRIPT, IMG, "</td>", LINK, "\u2028"):
        assert needle not in html
    data = html.split('id="spyrl-data">', 1)[1].split("</script>", 1)[0]
    payload = json.loads(data)
    texts = [e["t"] for g in payload["games"] for r in g["rounds"] for e in r["perform"] if e]
    assert HOSTILE in texts
    assert any(g["doc"] == HOSTILE_ID for g in payload["games"])
    assert embed_json({"t": "</script>"}) == '{"t":"\\u003c/script\\u003e"}'


def test_buffer_payload_matches_the_buffer(artefacts):
    buffer: EpisodeBuffer = artefacts["buffer"]
    payload = build_payload(artefacts["root"] / "hostile.parquet")
    games = buffer.games()
    assert len(payload["games"]) == len(games)
    for record in payload["games"]:
        rows = games[(record["run"], record["id"])]
        assert record["spy"] == rows[0]["spy_seat"] and record["caught"] == rows[0]["spy_caught"]
        assert record["nviol"] == sum(bool(r["violations"]) for r in rows)
        votes = {r["seat"]: r["vote"] for r in rows if r["stage"] == "vote"}
        assert {s: e["vote"] for s, e in enumerate(record["rounds"][0]["vote"])} == votes
        source = payload["documents"][record["src"]]["text"]
        assert record["spans"] and record["deg"] == "mask_spans"  # the default operator
        assert all(0 <= a <= b <= len(source) for a, b, _ in record["spans"])
        hostile = record["rounds"][0]["perform"][0]
        assert (
            decode_logprobs(hostile["lp"])[:3] == [0.0, -0.1, -0.2]
            and record["seats"][0]["agent"] == HostilePolicy.name
        )


def test_a_jsonl_buffer_gives_the_same_games(artefacts):
    jsonl = artefacts["buffer"].save(artefacts["root"] / "hostile.jsonl")
    assert build_payload(jsonl)["games"] == build_payload(artefacts["root"] / "hostile.parquet")["games"]


def test_run_and_tournament_payloads(artefacts):
    run = build_payload(artefacts["run"], games_per_iteration=2)
    assert [g["it"] for g in run["games"]] == [1, 1, 2, 2, 3, 3]  # metrics.jsonl's numbering
    assert [g["pv"] for g in run["games"]] == [0, 0, 1, 1, 2, 2]
    assert [m["stage"] for m in run["run"]["metrics"]] == ["detect", "detect", "perform", "perform"]
    assert run["run"]["metrics"][-1]["eval/na_rate"] is None  # NaN is not JSON
    tournament = build_payload(artefacts["tournament"])
    assert set(tournament["tournament"]["ratings"]) == {"heuristic", "random"}
    assert tournament["tournament"]["chart"].startswith("data:image/png;base64,")
    assert len(tournament["games"]) == 4


def _apply(source: str, spans) -> str:
    out, pos = [], 0
    for start, end, replacement in spans:
        out += [source[pos:start], replacement]
        pos = end
    return "".join([*out, source[pos:]])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["Tom", "has", "3", "apples.", "[…]", "\n", " ", "  ", "$x$"]), max_size=30), st.data())
def test_copy_spans_rebuild_the_spy_copy(words, data):
    source = " ".join(words)
    spy_copy = " ".join(data.draw(st.lists(st.sampled_from(words or ["x"]), max_size=30)))
    spans = copy_spans(source, spy_copy)
    assert _apply(source, spans) == spy_copy
    assert isinstance(degradation_of(source, spy_copy, spans), str)


# -------------------------------------------------------------------------- browser
def _find(*names: str) -> str | None:
    return next((path for path in map(shutil.which, names) if path), None)


@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("browser tests need selenium (pip install selenium; in the dev extra)")
    binary = _find("chromium", "chromium-browser", "google-chrome", "chrome")
    driver_path = _find("chromedriver")
    if not binary or not driver_path:
        reason = "browser tests need chromium and chromedriver (apt-get install chromium chromium-driver)"
        print(f"skipping: {reason}", file=sys.stderr)
        pytest.skip(reason)
    options = Options()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _load(driver, page: Path, fragment: str = "") -> None:
    driver.get(page.as_uri() + fragment)
    assert driver.execute_script("return document.body.dataset.ready") == "1", _errors(driver)


def test_browser_filters_reveal_and_hostile_text(artefacts, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    _load(browser, artefacts["pages"]["buffer"])
    games = build_payload(artefacts["root"] / "hostile.parquet")["games"]
    count = browser.find_element(By.ID, "count")
    assert count.text == f"{len(games)} of {len(games)} games"

    caught = sum(g["caught"] for g in games)
    Select(browser.find_element(By.ID, "f-caught")).select_by_value("1")
    assert count.text == f"{caught} of {len(games)} games"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#game-list tbody tr")) == caught
    Select(browser.find_element(By.ID, "f-caught")).select_by_value("")
    browser.find_element(By.ID, "f-doc").send_keys("plain")
    plain = sum(g["doc"] == "plain-doc" for g in games)
    assert count.text == f"{plain} of {len(games)} games"
    browser.find_element(By.ID, "f-doc").clear()
    browser.find_element(By.ID, "f-doc").send_keys("<script>")
    assert count.text == f"{len(games) - plain} of {len(games)} games"
    Select(browser.find_element(By.ID, "f-agent")).select_by_visible_text("heuristic")
    assert count.text == f"{len(games) - plain} of {len(games)} games"  # every game seats a heuristic

    browser.find_element(By.CSS_SELECTOR, "#game-list tbody tr").click()
    pane = browser.find_element(By.ID, "game-pane")
    performances = [e.text for e in pane.find_elements(By.CSS_SELECTOR, ".perf-text")]
    assert any(SCRIPT in t and IMG in t and "</td>" in t and "javascript:" in t for t in performances)
    assert HOSTILE_ID in pane.text and IMG in pane.find_element(By.CSS_SELECTOR, ".source").text
    assert HostilePolicy.name in pane.text
    assert browser.find_elements(By.CSS_SELECTOR, "#game-pane img, #game-pane a, #game-pane script") == []
    cells = browser.find_elements(By.CSS_SELECTOR, ".heat span")  # the log-prob heat strip, one cell a token
    assert cells and cells[1].get_attribute("title").startswith("token 2: logprob ≈ -0.1")

    game = games[int(browser.find_element(By.CSS_SELECTOR, "#game-list tbody tr.current").get_attribute("data-index"))]
    assert browser.find_elements(By.CSS_SELECTOR, ".card.spy, .spy-badge, .spy-col") == []
    browser.find_element(By.ID, "reveal").click()
    spies = browser.find_elements(By.CSS_SELECTOR, ".card.spy")
    assert [e.get_attribute("data-seat") for e in spies] == [str(game["spy"])]
    assert f"The spy was Player {game['spy'] + 1}" in browser.find_element(By.ID, "verdict").text
    browser.find_element(By.ID, "reveal").click()
    assert browser.find_elements(By.CSS_SELECTOR, ".card.spy") == []

    assert browser.execute_script("return typeof window.__pwned") == "undefined"
    assert _errors(browser) == []
    browser.save_screenshot(str(tmp_path / "game.png"))
    assert (tmp_path / "game.png").stat().st_size > 10_000


def test_browser_run_report_and_tournament(artefacts, browser, tmp_path):
    from selenium.webdriver.common.by import By

    _load(browser, artefacts["pages"]["run"])
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tab-run svg")) == 6
    assert len(browser.find_elements(By.CSS_SELECTOR, "#stage-timeline span")) == 4
    assert "iteration 3 (detect → perform)" in browser.find_element(By.ID, "tab-run").text
    assert browser.find_elements(By.CSS_SELECTOR, "#eval-table tr")
    browser.save_screenshot(str(tmp_path / "run.png"))
    browser.find_element(By.CSS_SELECTOR, ".samples button").click()
    assert browser.find_element(By.ID, "tab-games").is_displayed()
    assert browser.find_elements(By.CSS_SELECTOR, "#game-pane .card")

    _load(browser, artefacts["pages"]["tournament"])
    rows = browser.find_elements(By.CSS_SELECTOR, "#ratings-table tr")
    assert [r.find_element(By.TAG_NAME, "td").text for r in rows[1:]] in (
        ["heuristic", "random"],
        ["random", "heuristic"],
    )
    assert browser.find_element(By.CSS_SELECTOR, "#tab-tournament img").get_attribute("naturalWidth") != "0"
    assert _errors(browser) == []
    browser.save_screenshot(str(tmp_path / "tournament.png"))

    _load(browser, artefacts["pages"]["buffer"], "#game=1&reveal=1")  # a link to a revealed game
    game = build_payload(artefacts["root"] / "hostile.parquet")["games"][1]
    assert [e.get_attribute("data-seat") for e in browser.find_elements(By.CSS_SELECTOR, ".card.spy")] == [
        str(game["spy"])
    ]
