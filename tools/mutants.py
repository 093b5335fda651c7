"""Mutation check of docs/FIDELITY.md: a wrong form of each element must fail that element's tests.

For each mutant (a source-text substitution that implements a plausible wrong reading of one row of
the FIDELITY table), the script copies the repository to a temporary folder (the working tree is never
touched), applies the substitution there, and runs the tests the row names (every
``tests/FILE.py::NAME`` in the row) with ``pytest -x -q -n 0``. A mutant is *killed* when they fail,
*survived* when they pass; a substitution whose text is not found is an *error* (the script is stale).
The unmutated copy runs every named test first: they must pass.

    python tools/mutants.py [--jobs 2] [--only SUBSTRING] [--markdown OUT.md]
    python tools/mutants.py --only "the same order every epoch"   # one mutant (CI's smoke run)

Exit status 0 when every mutant is killed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIDELITY = ROOT / "docs" / "FIDELITY.md"
# not copied: git, virtual environments (CI's are .venv-ci*) and caches, run folders
IGNORED = shutil.ignore_patterns(
    ".git", ".venv*", ".cache*", "runs", "__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache"
)


@dataclass(frozen=True)
class Mutant:
    row: str  # the FIDELITY table's Element cell
    name: str  # what the wrong form is
    path: str  # file, relative to the repository root
    edits: tuple[tuple[str, str], ...]  # (old, new): each old text must occur exactly once


def m(row: str, name: str, path: str, *edits: tuple[str, str]) -> Mutant:
    return Mutant(row, name, path, tuple(edits))


MUTANTS = [
    m("Game setup", "training runner draws the spy among n − 1 seats", "spy_env/runner.py",
      ('"spy_seat": int(rng.integers(self.config.rules.n_players)),', '"spy_seat": int(rng.integers(self.config.rules.n_players - 1)),')),
    m("Game setup", "env draws the spy among n − 1 seats", "spy_env/env.py",
      ("drawn_spy = int(rng.integers(cfg.rules.n_players))", "drawn_spy = int(rng.integers(cfg.rules.n_players - 1))")),
    m("Target task τ (math)", "a failed task check costs nothing", "spy_env/game.py",
      ("penalty += getattr(cfg.penalties, check.penalty)", "penalty += 0.0")),
    m("Degradation g(x)", "removes half the ratio", "spy_env/degrade.py",
      ("target = ctx.ratio * sum(", "target = 0.5 * ctx.ratio * sum(")),
    m("g(x)'s marker", "paper preset marks removals", "trainers/presets.py",
      ('"mask_placeholder": "",', '"mask_placeholder": "[…]",')),
    m("Votes", "first <vote> instead of the last", "spy_env/parsing.py",
      ('content = " ".join(matches[-1].split())', 'content = " ".join(matches[0].split())')),
    m("Votes", "0-based seats", "spy_env/parsing.py",
      ("return VoteParse(k - 1, False, None)", "return VoteParse(min(k, n_players - 1), False, None)")),
    m("Eq. 4 detection reward", "an abstention counts as a correct detection", "spy_env/rewards.py",
      ("1.0 if target == spy_seat else 0.0", "1.0 if target in (spy_seat, None) else 0.0")),
    m("Performing rewards", "β and λ swapped", "spy_env/rewards.py",
      ("rewards[spy_seat] = -beta * gap", "rewards[spy_seat] = -lam * gap"),
      ("(beta / n_c) * gap - lam * (", "(lam / n_c) * gap - beta * (")),
    m("Performing rewards", "the civilians' share split over all players", "spy_env/rewards.py",
      ("rewards[s] = (beta / n_c) * gap", "rewards[s] = (beta / len(received)) * gap")),
    m("`<think>` stripping", "keeps what follows the first </think>", "spy_env/parsing.py",
      ("close = text.rfind(_THINK_CLOSE)", "close = text.find(_THINK_CLOSE)")),
    m("`<think>` stripping", "an unclosed <think> is shown", "spy_env/parsing.py",
      ("        text = text[:open_]\n", "        text = text.replace(_THINK_OPEN, '')\n")),
    m("Format/rule penalties", "penalties added with the wrong sign", "trainers/algorithm.py",
      ("+ np.asarray(penalties, dtype=np.float64)", "- np.asarray(penalties, dtype=np.float64)")),
    m("Eq. 5 detection advantage", "unbiased std", "trainers/algorithm.py",
      ("(r.mean(), r.std())", "(r.mean(), r.std(ddof=1))")),
    m("Eq. 5 detection advantage", "no ε", "trainers/algorithm.py",
      ("centered / (std + eps)", "centered / (std + 0.0 * eps + 1e-12)")),
    m("Eq. 5 detection advantage", "not centred on the group mean", "trainers/algorithm.py",
      ("centered = r - mean", "centered = r - 0.0")),
    m("Eq. 5 detection advantage", "a game's group is every replay of its document", "trainers/groups.py",
      ('return (row["game_id"], row["round"])', 'return (row["group_id"], row["round"])')),
    m("The spy's vote in Eq. 4/5/8", "the spy's untrained vote never joins the group", "trainers/samples.py",
      ('and config.spy_vote_in_group and row["role"] == "spy")', 'and config.spy_vote_in_group and row["role"] == "nobody")')),
    m("Identical-prompt groups", "prompt groups ignore the seat", "trainers/groups.py",
      ('return (row["group_id"], row["seat"], row["round"])', 'return (row["group_id"], row["round"])')),
    m("RAE", "α and 1 − α swapped", "trainers/algorithm.py",
      ("self.alpha * self.baselines.get(role, 0.0) + (1 - self.alpha) * role_means[role]",
       "(1 - self.alpha) * self.baselines.get(role, 0.0) + self.alpha * role_means[role]")),
    m("RAE", "the baseline forgets its history", "trainers/algorithm.py",
      ("self.alpha * self.baselines.get(role, 0.0) + (1 - self.alpha) * role_means[role]",
       "0.0 * self.baselines.get(role, 0.0) + 1.0 * role_means[role]")),
    m("RAE", "the baseline re-seeded from every batch (no memory)", "trainers/algorithm.py",
      ("self.baselines.setdefault(role, float(role_means[role]))", "self.baselines[role] = float(role_means[role])")),
    m("Performing reward estimator", "the N/A mass spread over the seats", "trainers/perform_rewards.py",
      ("received[seat] += float(probs[seat])", "received[seat] += float(probs[seat]) / max(sum(probs[:n_players]), 1e-9)")),
    m("RAE with group normalisation", "re-centred on the group mean", "trainers/algorithm.py",
      ("out[members] = advantages[members] / (std + eps) if std > 0",
       "out[members] = (advantages[members] - advantages[members].mean()) / (std + eps) if std > 0")),
    m("Performances that train", "the setting ignored: every role's performances train", "trainers/samples.py",
      ('if stage is Stage.PERFORM and config.perform_roles not in ("all", row["role"]):',
       'if stage is Stage.PERFORM and config.perform_roles not in ("all", row["role"], "spy", "civilian"):')),
    m("Stage controller", "detection → performing without the N/A condition", "trainers/algorithm.py",
      ("self.acc_ema >= self.acc_high and self.na_ema <= self.na_low", "self.acc_ema >= self.acc_high")),
    m("Stage controller", "performing → detection needs both conditions", "trainers/algorithm.py",
      ("(1 - self.acc_ema >= self.err_high or self.na_ema >= self.na_high)",
       "(1 - self.acc_ema >= self.err_high and self.na_ema >= self.na_high)")),
    m("Stage controller", "K_min off by one", "trainers/algorithm.py",
      ("self.iterations_in_stage < self.stage_length(self.stage)",
       "self.iterations_in_stage < self.stage_length(self.stage) - 1")),
    m("Stage lengths", "k_perform ignored: every stage k_min long", "trainers/algorithm.py",
      ("if stage is Stage.PERFORM and self.k_perform is not None else", "if False else")),
    m("Stage controller", "strict accuracy threshold", "trainers/algorithm.py",
      ("self.acc_ema >= self.acc_high", "self.acc_ema > self.acc_high")),
    m("Controller EMA ρ", "paper preset ρ = 0.9", "trainers/presets.py", ('"stage_ema": 0.5,', '"stage_ema": 0.9,')),
    m("Controller inputs", "na over every vote even when the spy's vote does not train", "trainers/algorithm.py",
      ('na = metrics["na_rate"] if spy_vote_trained else metrics["civilian_na_rate"]', 'na = metrics["na_rate"]')),
    m("Eq. 7 clipped objective", "ε_low and ε_high swapped", "trainers/loss.py",
      ("clipped = torch.clamp(ratio, 1 - c.epsilon_low, 1 + c.epsilon_high)",
       "clipped = torch.clamp(ratio, 1 - c.epsilon_high, 1 + c.epsilon_low)")),
    m("Eq. 7 clipped objective", "ε_high ignored", "trainers/loss.py",
      ("torch.clamp(ratio, 1 - c.epsilon_low, 1 + c.epsilon_high)", "torch.clamp(ratio, 1 - c.epsilon_low, 1 + c.epsilon_low)")),
    m("Eq. 8 vote ratio", "mean log-ratio per vote instead of the sum", "trainers/loss.py",
      ('if level == "action":\n        return (log_ratio * mask).sum(-1).unsqueeze(-1)',
       'if level == "action":\n        return ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)')),
    m("Eq. 8 vote ratio", "a vote's KL averaged over its tokens (β/T)", "trainers/loss.py",
      ("terms = terms + config.beta * (per_token_kl * mask).sum(-1)",
       "terms = terms + config.beta * (per_token_kl * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)")),
    m("Eq. 8 vote ratio", "dapo counts a vote's tokens (length weighting)", "trainers/loss.py",
      ("return sum(int(s.sum().item() > 0) for s in scored)", "return int(sum(s.sum().item() for s in scored))")),
    m("A constrained choice's log-prob", "whole-vocabulary log-prob of the choice", "trainers/logprobs.py",
      ("allowed = torch.log_softmax(row[choice.step, list(choice.tokens)], dim=-1)",
       "allowed = row[choice.step, list(choice.tokens)] - lse[choice.step]")),
    m("Vote gradient estimator", "expected loss not weighted by the behaviour probabilities", "trainers/choices.py",
      ("return -(old_logq.exp() * torch.min(ratio * coefficients, clipped * coefficients)).sum()",
       "return -(torch.min(ratio * coefficients, clipped * coefficients)).mean()")),
    m("Vote gradient estimator", "expected accepts any temperature", "trainers/config.py",
      ("if gradient.exact_distribution and (decoding.temperature != 1 or decoding.top_p < 1):",
       "if gradient.exact_distribution and decoding.top_p < 0:")),
    m("Eq. 5 groups with few voters", "batch groups are single rows", "trainers/groups.py",
      ('AdvantageGrouping(_one_group, whole_batch=True)', 'AdvantageGrouping(id, whole_batch=True)')),
    m("Eq. 5 groups with few voters", "batch groups normalise each process's votes alone", "trainers/advantages.py",
      ("stats = batch_group_stats(reduce(vote_moments(rows, rewards, c.vote_gradient, weight)))",
       "stats = batch_group_stats(vote_moments(rows, rewards, c.vote_gradient, weight))")),
    m("Eq. 7 aggregation", "dapo divides by a micro-batch's tokens", "trainers/update.py",
      ("items = [loss_items([samples.scored[i] for i in mini], objective.level) for mini in minis]",
       "items = [loss_items([samples.scored[i] for i in mini[: self.config.micro_batch_size]], objective.level) for mini in minis]")),
    m("Eq. 7 aggregation", "dapo divides performances by the micro-batch's own tokens", "trainers/loss.py",
      ("items = mask.sum() if scale.num_items_in_batch is None else torch.as_tensor(scale.num_items_in_batch)",
       "items = mask.sum()")),
    m("Eq. 7 aggregation", "dapo denominator not divided by the number of processes", "trainers/update.py",
      ("items = [x / self.accelerator.num_processes for x in self.sum_over_processes(items)]",
       "items = list(self.sum_over_processes(items))")),
    m("KL", "low_var_kl not clamped", "trainers/loss.py",
      ("return (torch.exp(delta) - delta - 1).clamp(-10.0, 10.0)", "return torch.exp(delta) - delta - 1")),
    m("KL", "k3 clamp widened", "trainers/loss.py", (".clamp(-10.0, 10.0)", ".clamp(-10.0, 1000.0)")),
    m("Mini-batch", "documents counted as samples", "trainers/mini_batch_units.py",
      ("    return -(-documents // mini_batch_size)", "    return 0")),
    m("Mini-batch", "document-counted updates rounded down", "trainers/mini_batch_units.py",
      ("    return -(-documents // mini_batch_size)", "    return max(1, documents // mini_batch_size)")),
    m("Hyper-parameters", "learning rate", "trainers/presets.py", ('"learning_rate": 1e-6,', '"learning_rate": 1e-5,')),
    m("Hyper-parameters", "model id", "trainers/presets.py",
      ('"name_or_path": "Qwen/Qwen3-4B-Instruct-2507",', '"name_or_path": "Qwen/Qwen3-4B",')),
    m("Hyper-parameters", "prompt length", "trainers/presets.py",
      ('"max_prompt_tokens": 12288,', '"max_prompt_tokens": 8192,')),
    m("Hyper-parameters", "dtype", "trainers/presets.py", ('"dtype": "bfloat16",', '"dtype": "float32",')),
    m("Hyper-parameters", "gradient checkpointing off", "trainers/presets.py",
      ('"gradient_checkpointing": True,', '"gradient_checkpointing": False,')),
    m("Hyper-parameters", "bf16 without fp32 master weights", "trainers/precision.py",
      ("    return MasterAdamW(params, **kwargs)", "    return torch.optim.AdamW(params, **kwargs)")),
    m("Hyper-parameters", "documents_per_iteration counted per process", "trainers/grpo.py",
      ("games = share * c.rollout.games_per_document",
       "games = c.rollout.documents_per_iteration * c.rollout.games_per_document"),
      ("documents = documents[start : start + share]",
       "documents = documents[start : start + c.rollout.documents_per_iteration]")),
    m("Training corpus", "nemotron's default config", "spy_env/corpus.py",
      ('config = source.partition(":")[2] or "4plus"', 'config = source.partition(":")[2] or "3"')),
    m("Other tasks' corpora", "GovReport's summary as the source", "spy_env/task_corpora.py",
      ('return row.get("report"), {', 'return row.get("summary"), {')),
    m("Document order", "every step plays the first documents of the epoch", "trainers/documents.py",
      ("for position in range(step * per_step, (step + 1) * per_step):", "for position in range(per_step):")),
    m("Document order", "the same order every epoch", "trainers/documents.py",
      ("seed_for(seed, epoch, SeedStream.EPOCH)", "seed_for(seed, 0, SeedStream.EPOCH)")),
    m("Held-out documents", "split inverted", "spy_env/corpus.py",
      ("(heldout if is_heldout(doc.id, fraction, salt) else train).append(doc)",
       "(train if is_heldout(doc.id, 1 - fraction, salt) else heldout).append(doc)")),
    m("Game evaluation", "detection accuracy counts misses", "spy_env/heldout.py",
      ('"detection_accuracy": _share(r["vote"] == spy for r in civilian)',
       '"detection_accuracy": _share(r["vote"] != spy for r in civilian)')),
    m("Benchmark evaluation", "correct answers scored wrong", "spyrl/evaluation/scoring.py",
      ("return math_equal(gold, answer, timeout=int(self.timeout))",
       "return not math_equal(gold, answer, timeout=int(self.timeout))")),
    m("Benchmark evaluation", "the card's average over the five named benchmarks", "spyrl/evaluation/run.py",
      ('"accuracy": float(np.mean([runs[name]["accuracy"] for name in CARD_BENCHMARKS])),',
       '"accuracy": float(np.mean([runs[name]["accuracy"] for name in CARD_BENCHMARKS if name not in GUESSED_BENCHMARKS])),')),
    m("Benchmark evaluation", "GSM8K's budget cut to 128 tokens", "spyrl/evaluation/benchmarks.py",
      ('_math_item("question", lambda r: _gsm8k_gold(r["answer"])),\n            4096,',
       '_math_item("question", lambda r: _gsm8k_gold(r["answer"])),\n            128,')),
]  # fmt: skip


def named_tests() -> dict[str, list[str]]:
    """Each FIDELITY row's Element → every ``tests/FILE.py::NAME`` the row names."""
    rows = {}
    for line in FIDELITY.read_text(encoding="utf-8").splitlines():
        if line.startswith("| ") and not line.startswith("| Element") and not line.startswith("|---"):
            element = line.strip("|").split("|")[0].strip()
            rows[element] = list(dict.fromkeys(re.findall(r"`(tests/\w+\.py::\w+)`", line)))
    return rows


def run_tests(repo: Path, tests: list[str], timeout: int) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1"}
    # -n 0: one process, so a failure is exit code 1 (under xdist, -x stops with 2, "interrupted")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", "-m", "", *tests]
    try:
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "timeout"
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return proc.returncode, lines[-1] if lines else ""


def apply(repo: Path, mutant: Mutant) -> None:
    path = repo / mutant.path
    text = path.read_text(encoding="utf-8")
    for old, new in mutant.edits:
        if text.count(old) != 1:
            raise LookupError(f"{mutant.path}: expected 1 occurrence of {old[:60]!r}, found {text.count(old)}")
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")


def try_mutant(mutant: Mutant, tests: list[str], timeout: int) -> tuple[str, float, str]:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="spyrl-mutant-") as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(ROOT, repo, ignore=IGNORED)
        try:
            apply(repo, mutant)
        except LookupError as e:
            return "error", time.perf_counter() - start, str(e)
        code, last = run_tests(repo, tests, timeout)
    outcome = {0: "survived", 1: "killed"}.get(code, "error")
    return outcome, time.perf_counter() - start, last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="run only mutants whose row or name contains this")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per mutant's tests")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    rows = named_tests()
    mutants = [x for x in MUTANTS if args.only in x.row or args.only in x.name]
    missing = sorted({x.row for x in mutants} - set(rows))
    if missing:
        print(f"error: rows not in docs/FIDELITY.md: {missing}", file=sys.stderr)
        return 2
    uncovered = sorted(set(rows) - {x.row for x in MUTANTS})
    baseline_tests = sorted({t for x in mutants for t in rows[x.row]})
    with tempfile.TemporaryDirectory(prefix="spyrl-mutant-") as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(ROOT, repo, ignore=IGNORED)
        code, last = run_tests(repo, baseline_tests, args.timeout)
    if code != 0:
        print(f"error: the named tests fail without any mutant: {last}", file=sys.stderr)
        return 2
    print(f"baseline: {len(baseline_tests)} named tests pass ({last})", flush=True)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda x: try_mutant(x, rows[x.row], args.timeout), mutants))
    table = ["| Row | Mutant | File | Outcome | s |", "|---|---|---|---|---|"]
    for mutant, (outcome, seconds, _last) in zip(mutants, results, strict=True):
        table.append(f"| {mutant.row} | {mutant.name} | `{mutant.path}` | {outcome} | {seconds:.0f} |")
    killed = sum(r[0] == "killed" for r in results)
    summary = f"{killed} of {len(mutants)} mutants killed"
    if uncovered and not args.only:
        summary += f"; rows without a mutant: {uncovered}"
    print("\n".join(table) + "\n\n" + summary)
    for mutant, (outcome, _, last) in zip(mutants, results, strict=True):
        if outcome != "killed":
            print(f"{outcome}: {mutant.row} / {mutant.name}: {last}", file=sys.stderr)
    if args.markdown:
        from spy_env.io import write_text  # atomic, never through a link at the path

        write_text(args.markdown, "\n".join(table) + "\n\n" + summary + "\n")
    return 0 if killed == len(mutants) else 1


if __name__ == "__main__":
    sys.exit(main())
