"""Nothing shipped rots: every script in benchmarks/, examples/ and tools/ runs here in a smoke mode (its whole
path, a tiny model, seconds to a minute), and every command the docs quote parses against today's CLI and
scripts.

:data:`COVERAGE` names, for each shipped script, the test that runs it; a script added without one fails
:func:`test_every_shipped_script_has_a_smoke_run`. Scripts that need vLLM run in CI's vLLM environment
(marked ``vllm``), the verifiers example in the verifiers one.
"""

from __future__ import annotations

import ast
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("benchmarks", "examples", "tools")

# script -> the test that runs it ("NAME" in this module, or "tests/FILE.py::NAME")
COVERAGE = {
    "benchmarks/answer_detection.py": "test_benchmark_smoke",
    "benchmarks/busy_play.py": "test_benchmark_smoke",
    "benchmarks/env_throughput.py": "test_benchmark_smoke",
    "benchmarks/play_time.py": "test_benchmark_smoke",
    "benchmarks/rollout_overhead.py": "test_benchmark_smoke",
    "benchmarks/roofline.py": "test_benchmark_smoke",
    "benchmarks/smollm2_iteration.py": "test_benchmark_smoke",
    "benchmarks/trainer_vs_trl.py": "test_benchmark_smoke",
    "benchmarks/viewer_scale.py": "test_viewer_scale_smoke",
    "benchmarks/vote_throughput.py": "test_benchmark_smoke",
    "benchmarks/vllm_rollout.py": "test_vllm_scripts_smoke",
    "examples/custom_policy.py": "test_scripted_examples_run",
    "examples/quickstart.py": "test_scripted_examples_run",
    "examples/openai_server_games.py": "test_the_openai_example_plays_against_a_served_model",
    "examples/openenv_client.py": "tests/test_integrations_openenv.py::test_the_openenv_client_example_plays_a_served_seat",
    "examples/trl_grpo.py": "tests/test_integrations_trl.py::test_the_live_self_play_example_trains_and_writes_a_checkpoint_only_when_asked",
    "examples/verifiers_episode.py": "tests/test_integrations_verifiers.py::test_the_verifiers_example_plays_an_episode",
    "examples/vllm_games.py": "test_vllm_scripts_smoke",
    "examples/accelerate/fsdp.yaml": "test_accelerate_configs_load",
    "examples/accelerate/multi_gpu.yaml": "test_accelerate_configs_load",
    "examples/accelerate/zero3.yaml": "test_accelerate_configs_load",
    "tools/gpu_check.py": "test_gpu_check_cpu_dry_run",
    "tools/mutants.py": "test_mutants_kills_one_mutant",
    "tools/install_vllm_cpu.sh": ".ci/run",  # CI builds its vLLM environment with it, then runs the vllm tests there
}  # fmt: skip


def _shipped() -> list[str]:
    files = (p for folder in SHIPPED for p in (ROOT / folder).rglob("*") if p.is_file())
    return sorted(str(p.relative_to(ROOT)) for p in files if "__pycache__" not in p.parts)


def test_every_shipped_script_has_a_smoke_run():
    """A script added to benchmarks/, examples/ or tools/ without a smoke run fails here; so does a name in
    :data:`COVERAGE` whose test is gone or whose module never names the script."""
    assert sorted(COVERAGE) == _shipped(), "every script in benchmarks/, examples/ and tools/ needs a smoke run"
    for script, where in COVERAGE.items():
        path, _, name = where.rpartition("::")
        source = (ROOT / (path or "tests/test_scripts.py")).read_text() if where != ".ci/run" else ""
        if where == ".ci/run":
            assert f"bash {script}" in (ROOT / ".ci" / "run").read_text(), script
            continue
        tests = {n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)}
        assert name in tests, f"{where}: no such test (it should run {script})"
        mention = Path(script).parent.name if script.endswith(".yaml") else Path(script).name
        assert mention in source, f"{where} does not run {script}"


def _run(script: str, *args: str, cwd: Path, timeout: int = 600) -> str:
    proc = subprocess.run(
        [sys.executable, str(ROOT / script), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )
    assert proc.returncode == 0, f"{script} {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc.stdout


BENCHMARK_SMOKES = {
    "benchmarks/answer_detection.py": "incremental:",
    "benchmarks/busy_play.py": "x idle (same)",
    "benchmarks/env_throughput.py": "ratio spy_env steps/s : connect_four steps/s",
    "benchmarks/play_time.py": "shared prefixes vs full prefill: the same tokens",
    "benchmarks/rollout_overhead.py": "ratio runner / raw",
    "benchmarks/roofline.py": "of copy bandwidth",
    "benchmarks/smollm2_iteration.py": "ratio iteration / pure compute",
    "benchmarks/trainer_vs_trl.py": "ratio spyrl / TRL",
    "benchmarks/vote_throughput.py": "generate-1",
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(BENCHMARK_SMOKES))
def test_benchmark_smoke(script, tmp_path):
    pytest.importorskip("transformers")
    assert BENCHMARK_SMOKES[script] in _run(script, "--smoke", cwd=tmp_path)


@pytest.mark.slow
def test_roofline_compile_smoke(tmp_path):
    """The roofline's static-cache decode, eager and under ``torch.compile`` (needs a C++ compiler, as inductor does)."""
    pytest.importorskip("transformers")
    if not shutil.which("g++") and not shutil.which("c++"):
        pytest.skip("torch.compile on a CPU needs a C++ compiler")
    out = _run("benchmarks/roofline.py", "--smoke", "--compile", cwd=tmp_path)
    assert re.search(r"static cache: eager [\d.]+ ms/step; torch.compile [\d.]+ ms/step", out), out[-2000:]


@pytest.mark.slow
def test_viewer_scale_smoke(tmp_path):
    pytest.importorskip("selenium")
    if not (shutil.which("chromium") or shutil.which("google-chrome")) or not shutil.which("chromedriver"):
        pytest.skip("headless Chromium is not installed (CI installs it: apt-get install chromium chromium-driver)")
    out = _run("benchmarks/viewer_scale.py", "--smoke", "--out", str(tmp_path / "pages"), cwd=tmp_path)
    assert "ratio 100/10 games" in out and (tmp_path / "pages" / "games_100.html").is_file()


@pytest.mark.slow
def test_gpu_check_cpu_dry_run(tmp_path):
    """The script a lent GPU runs, known to work before one is lent: phases 1-3 here (phase 4 needs vLLM: its
    dry run is in :func:`test_vllm_scripts_smoke`)."""
    pytest.importorskip("accelerate")
    out = _run("tools/gpu_check.py", "--cpu-dry-run", "--phases", "bf16,checkpointing,fsdp", cwd=tmp_path)
    phases = re.findall(r'"phase": "([\w-]+)"', out)
    assert phases == ["bf16", "checkpointing", "fsdp"], out[-2000:]


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize(
    "script", ["benchmarks/vllm_rollout.py", "benchmarks/vllm_rollout.py --iteration", "examples/vllm_games.py",
               "tools/gpu_check.py"],
)  # fmt: skip
def test_vllm_scripts_smoke(script, tmp_path, vllm_tiny_dir):
    """What needs vLLM, on its CPU engine: the rollout benchmark (games, and a self-play iteration with each
    engine), the games example and gpu_check's phase 4."""
    pytest.importorskip("vllm")
    if script == "examples/vllm_games.py":
        args = ["--model", str(vllm_tiny_dir), "--games", "1", "--max-new-tokens", "16", "--out", "games.parquet"]
        out = _run(script, *args, cwd=tmp_path)
        assert (tmp_path / "games.parquet").is_file(), out
    elif script == "tools/gpu_check.py":
        out = _run(script, "--cpu-dry-run", "--phases", "vllm-colocate", "--model", str(vllm_tiny_dir), cwd=tmp_path)
        assert re.findall(r'"phase": "([\w-]+)"', out) == ["vllm-colocate"], out[-2000:]
    elif script.endswith("--iteration"):
        out = _run("benchmarks/vllm_rollout.py", "--iteration", "--smoke", cwd=tmp_path)
        assert "rollout.generation=vllm-colocate" in out and "vllm-colocate / hf time" in out
    else:
        assert "vllm / hf:" in _run(script, "--smoke", cwd=tmp_path)


@pytest.mark.parametrize("script", ["examples/quickstart.py", "examples/custom_policy.py"])
def test_scripted_examples_run(script, tmp_path):
    assert "spy" in _run(script, cwd=tmp_path, timeout=300)


def test_the_openai_example_plays_against_a_served_model(tmp_path):
    """examples/openai_server_games.py against an OpenAI-compatible server on 127.0.0.1 (scripted replies)."""
    from tests.helpers import answer_server

    def reply(n: int) -> dict:
        text = "Problem: $2+3$? Solution: $\\boxed{5}$." if n % 2 == 0 else "Player 1 looks off. <vote>1</vote>"
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}

    with answer_server(reply) as url:
        args = ["--model", "m", "--url", url, "--games", "2", "--out", str(tmp_path / "t")]
        out = _run("examples/openai_server_games.py", *args, cwd=tmp_path, timeout=300)
    assert "served" in out and "heuristic" in out and (tmp_path / "t").exists()


def test_accelerate_configs_load():
    """examples/accelerate/*.yaml: accelerate's own loader accepts each (gpu_check's phase 3 launches fsdp.yaml)."""
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file

    for path in sorted((ROOT / "examples" / "accelerate").glob("*.yaml")):
        config = load_config_from_file(str(path))
        assert config.distributed_type is not None, path


@pytest.mark.slow
def test_mutants_kills_one_mutant(tmp_path):
    """tools/mutants.py end to end on one row: the copy, the substitution, the row's tests, the verdict."""
    out = _run(
        "tools/mutants.py", "--only", MUTANT_ROW, "--jobs", "1", "--markdown", str(tmp_path / "m.md"), cwd=tmp_path
    )
    assert "killed" in out and (tmp_path / "m.md").is_file()


MUTANT_ROW = "the same order every epoch"  # one mutant whose row's tests take seconds


# ------------------------------------------------------------------------------------ documented commands
_PREFIX = re.compile(r"(spyrl |python (?:benchmarks|examples|tools)/|bash tools/)")


def _code_lines(page: Path) -> list[str]:
    """The lines of a page's fenced code blocks, continuation backslashes joined."""
    blocks = re.findall(r"```[\w-]*\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    return [line.strip() for block in blocks for line in block.replace("\\\n", " ").splitlines()]


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "lab").rglob("*.md"))]


@cache
def _shell_variables() -> dict[str, str]:
    """``NAME=value`` lines of the docs' code blocks (``S="--temperature 0 ..."``), first definition first."""
    found: dict[str, str] = {}
    for page in _pages():
        for line in _code_lines(page):
            for part in re.split(r"\s*;\s*", line):
                if match := re.fullmatch(r"([A-Z]\w*)=(\S.*)", part.split(" #")[0].strip()):
                    found.setdefault(match.group(1), " ".join(_words(match.group(2))))
    return found


def _docstring_lines(script: Path) -> list[str]:
    return [line.strip() for line in (ast.get_docstring(ast.parse(script.read_text())) or "").splitlines()]


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) for every command the README and docs/ quote in a code block, and the scripts'
    docstrings show."""
    found = []
    scripts = [ROOT / s for s in _shipped() if s.endswith(".py")]
    for page in [*_pages(), *scripts]:
        for line in _code_lines(page) if page.suffix == ".md" else _docstring_lines(page):
            for part in re.split(r"\s*(?:&&|;|\|\|?|&)\s*", line):
                if _PREFIX.match(part):
                    found.append((str(page.relative_to(ROOT)), part.split(" #")[0].strip()))
    return found


def _expanded(command: str) -> list[str]:
    """The command's words with the docs' shell variables put in (an undefined one stands for one word)."""
    known = _shell_variables()
    text = re.sub(r"\$\{?([A-Z]\w*)\}?", lambda m: known.get(m.group(1), "VALUE"), command)
    return _words(text)


@cache
def _script_help(script: str) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, f"{script} --help: {proc.stderr[-2000:]}"
    return proc.stdout


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:  # an unclosed quote in prose: read it as plain words
        return command.split()


def test_the_docs_quote_commands():
    commands = documented_commands()
    assert len(commands) > 40 and any(c.startswith("python benchmarks/") for _, c in commands)


@pytest.mark.parametrize("page, command", documented_commands())
def test_a_documented_command_parses(page, command):
    """A renamed flag or subcommand breaks this test, not a user: ``spyrl`` commands through the CLI's own
    parser, scripts' flags against their ``--help``."""
    words = _expanded(command)
    if words[0] == "spyrl":
        from spyrl.commands import build_parser

        try:
            build_parser().parse_args(words[1:])
        except SystemExit as e:
            pytest.fail(f"{page}: `{command}` does not parse (exit {e.code})")
        return
    script = words[1]
    assert (ROOT / script).is_file(), f"{page}: {script} does not exist"
    if script.endswith(".sh"):
        return
    flags = [w.split("=")[0] for w in words[2:] if w.startswith("--")]
    if flags:
        shown = _script_help(script)
        missing = [f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", shown)]
        assert not missing, f"{page}: `{command}` uses {missing}, which {script} --help does not list"
