"""The docs site (mkdocs.yml) builds strictly: the guide pages, an API reference of the four packages from
their docstrings (read statically by griffe: no torch needed), and the lab's pages brought in by
docs/hooks/lab.py; a broken link, anchor or repository path fails the build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# API page -> (the package's folder, a name documented in it)
API = {
    "spy_env": ("spy_env", "spy_env.env.make"),
    "agents": ("agents", "agents.registry.load"),
    "trainers": ("trainers", "trainers.grpo.SpyRLTrainer"),
    "integrations": ("spyrl/integrations", "spyrl.integrations.trl_selfplay.SelfPlayRollout"),
}
# The build with another docs folder: MkDocs' CLI cannot point mkdocs.yml at one, its Python API can.
BUILD_WITH_DOCS = """
import logging, sys
from mkdocs.commands.build import build
from mkdocs.config import load_config
logging.basicConfig(format="%(levelname)s %(message)s")
build(load_config("mkdocs.yml", docs_dir=sys.argv[1], site_dir=sys.argv[2], strict=True))
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env=_quiet(),
    )  # fmt: skip
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-4000:]}"
    return out


def _quiet() -> dict[str, str]:
    return {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor


def _public_modules(folder: str) -> list[str]:
    package = folder.replace("/", ".")
    return [f"{package}.{p.stem}" for p in sorted((ROOT / folder).glob("*.py")) if not p.stem.startswith("_")]


@pytest.mark.parametrize("page", sorted(API))
def test_the_api_reference_documents_every_public_module(site, page):
    folder, name = API[page]
    html = (site / "api" / page / "index.html").read_text(encoding="utf-8")
    missing = [module for module in _public_modules(folder) if f'id="{module}"' not in html]
    assert missing == [], f"docs/api/{page}.md lacks a `::: module` line for {missing}"
    assert f'id="{name}"' in html


def test_the_site_holds_the_guides_and_the_lab(site):
    for page in ("index.html", "GUIDE/index.html", "TRAINING/index.html", "lab/index.html", "lab/RESULTS/index.html"):
        assert (site / page).is_file(), page
    lab_pages = list((ROOT / "lab" / "results").glob("*.md"))
    assert lab_pages and all((site / "lab" / "results" / p.stem / "index.html").is_file() for p in lab_pages)
    guide = (site / "GUIDE" / "index.html").read_text(encoding="utf-8")
    assert 'href="../lab/RESULTS/#baselines"' in guide  # ../lab/RESULTS.md#baselines, made a site link
    assert "<code>README.md</code>" in guide  # ../README.md is not on the site: its repository path


def test_the_index_quotes_the_readme_commands():
    """docs/index.md's install, play and test commands are the README's, word for word."""
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    commands = [line for line in index.splitlines() if line.startswith("pip install")]
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(commands) == 2 and all(command in readme for command in commands)


@pytest.mark.parametrize(
    "link, message",
    [
        ("[gone](NOPE.md)", "docs/NOPE.md"),  # a page: the hook finds nothing in the repository
        ("[gone](GUIDE.md#no-such-section)", "does not contain an anchor '#no-such-section'"),  # MkDocs' check
        ("[gone](../lab/results/nope.json)", "lab/results/nope.json"),  # a repository file
    ],
)
def test_a_broken_link_fails_the_build(tmp_path, link, message):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    with (docs / "index.md").open("a", encoding="utf-8") as page:
        page.write(f"\nSee {link}.\n")
    proc = subprocess.run(
        [sys.executable, "-c", BUILD_WITH_DOCS, str(docs), str(tmp_path / "site")],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env=_quiet(),
    )  # fmt: skip
    assert proc.returncode != 0, f"the build passed with {link}"
    assert message in proc.stderr, proc.stderr[-4000:]
