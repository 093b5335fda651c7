"""Viewer scale: page size and time to first render in headless Chromium, 10,000 games vs 100.

Both buffers are real rollouts of the batched runner (5 players, 1 round, ``mask_spans``) with the
scripted ``heuristic`` agent in every seat; ``--logprob-tokens K`` wraps it so every action also
carries K per-token log-probs, as an LLM's would (the page then draws K-cell heat strips).
Each page is written by ``spyrl.viewer.write_page`` and opened through ``file://`` in headless
Chromium (selenium). Reported per page: file size, Python build time, time to first render
(``performance.now()`` at the end of the first list render, i.e. from navigation start through
HTML parse, ``JSON.parse`` and the first 25 rows), the time of one filter change over all games,
and of opening one game. The last line is the 10k/100 ratio measured side by side in one run.

    python benchmarks/viewer_scale.py [--games 10000] [--small 100] [--logprob-tokens 0] [--out DIR]
    python benchmarks/viewer_scale.py --smoke   # 100 games vs 10, one load each: checks the path, not the scale
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


class WithLogprobs:
    """A scripted policy whose actions also carry ``k`` synthetic per-token log-probs."""

    def __init__(self, policy, k: int, seed: int = 0) -> None:
        self.policy, self.k, self.name = policy, k, policy.name
        self.rng = np.random.default_rng(seed)

    def act(self, observations):
        from spy_env.policy import Action

        return [
            Action(text=text, logprobs=(-self.rng.exponential(0.7, self.k)).tolist())
            for text in self.policy.act(observations)
        ]


def make_buffer(path: Path, games: int, logprob_tokens: int) -> float:
    import agents
    from spy_env.runner import Runner

    policy = agents.load("heuristic")
    if logprob_tokens:
        policy = WithLogprobs(policy, logprob_tokens)
    start = time.perf_counter()
    Runner(max_concurrent_games=512).run([policy] * 5, games, seed=0).save(path)
    return time.perf_counter() - start


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = shutil.which("chromium") or shutil.which("google-chrome") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000",
                "--enable-precise-memory-info"):  # fmt: skip
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def measure(driver, page: Path) -> dict[str, float]:
    start = time.perf_counter()
    driver.get(page.as_uri())
    load_s = time.perf_counter() - start
    first_render_ms = driver.execute_script("return window.__spyrlFirstRenderMs")
    filter_ms = driver.execute_script(
        "var s = document.getElementById('f-caught'), t = performance.now();"
        "s.value = '0'; s.dispatchEvent(new Event('change'));"
        "return performance.now() - t;"
    )
    open_ms = driver.execute_script(
        "var t = performance.now(); document.querySelector('#game-list tbody tr').click(); return performance.now() - t;"
    )
    heap_mb = driver.execute_script("return performance.memory ? performance.memory.usedJSHeapSize / 1e6 : -1")
    return {"first_render_ms": first_render_ms, "filter_ms": filter_ms, "open_game_ms": open_ms,
            "load_s": load_s, "heap_mb": heap_mb}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--logprob-tokens", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="page loads per size (the median is reported)")
    parser.add_argument("--out", default=None, help="keep buffers and pages here (default: a temporary folder)")
    parser.add_argument("--smoke", action="store_true", help="100 games vs 10, 4 log-probs an action, one load each")
    args = parser.parse_args(argv)
    if args.smoke:
        args.games, args.small, args.logprob_tokens, args.repeats = 100, 10, 4, 1

    from spyrl.viewer import write_page

    folder = Path(args.out or tempfile.mkdtemp(prefix="viewer-scale-"))
    folder.mkdir(parents=True, exist_ok=True)
    results = {}
    driver = browser()
    try:
        for games in (args.small, args.games):
            buffer = folder / f"games_{games}.parquet"
            rollout_s = make_buffer(buffer, games, args.logprob_tokens)
            start = time.perf_counter()
            page = write_page(buffer, folder / f"games_{games}.html")
            build_s = time.perf_counter() - start
            runs = [measure(driver, page) for _ in range(args.repeats)]
            median = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
            results[games] = {"size_mb": page.stat().st_size / 1e6, "build_s": build_s, **median}
            print(
                f"{games:>6} games: page {results[games]['size_mb']:.1f} MB (buffer {buffer.stat().st_size / 1e6:.1f} MB, "
                f"rollout {rollout_s:.0f} s, page build {build_s:.1f} s); first render {median['first_render_ms']:.0f} ms, "
                f"filter {median['filter_ms']:.1f} ms, open a game {median['open_game_ms']:.1f} ms, "
                f"load {median['load_s']:.2f} s, JS heap {median['heap_mb']:.0f} MB"
            )
    finally:
        driver.quit()
    big, small = results[args.games], results[args.small]
    print(
        f"ratio {args.games}/{args.small} games: size x{big['size_mb'] / small['size_mb']:.0f}, "
        f"first render x{big['first_render_ms'] / small['first_render_ms']:.1f}, "
        f"filter x{big['filter_ms'] / max(small['filter_ms'], 0.1):.0f}"
    )
    print(f"pages in {folder}")


if __name__ == "__main__":
    main()
