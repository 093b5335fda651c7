"""MkDocs hook: the lab's pages on the docs site, and the pages' GitHub links made site links.

The lab lives outside ``docs_dir``: ``lab/README.md`` becomes the site's ``lab/index.md``, the other lab
pages (``lab/*.md``, ``lab/results/*.md``) and the images the site's pages link to under ``lab/`` keep
their repository path. ``docs/X`` is the site's ``X``.

Every page's Markdown is written for GitHub, a link being a path relative to the page's file in the
repository. At build time (``on_page_markdown``) each such link becomes, by what it points to:

- a page or image on the site: its path relative to the page's place on the site, which MkDocs then
  validates (``validation:`` in mkdocs.yml), anchors included;
- another file or folder of the repository (a script, a JSON result, a config): inline code of its
  repository path;
- nothing in the repository: a :class:`~mkdocs.exceptions.PluginError`, which fails the build.

Links inside code (fenced blocks and code spans) are left alone.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]  # the repository: this file is docs/hooks/lab.py
LAB_INDEX = "lab/README.md"
LAB_PAGES = ("lab/*.md", "lab/results/*.md")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp")

FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1[`~]*[ \t]*$", re.M | re.S)  # a list item's too
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
# [text](target) or ![alt](target "title"); the text may hold code spans and one level of brackets
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\((<[^>]*>|[^()\s]+)((?:\s+\"[^\"]*\")?)\)")
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//|#)", re.I)


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Put the lab's pages in the nav's "Lab" section, after those mkdocs.yml lists there itself."""
    section = next((item["Lab"] for item in config.nav or [] if isinstance(item, dict) and "Lab" in item), None)
    if not isinstance(section, list):
        raise PluginError('mkdocs.yml: the nav needs a "Lab" section (a list) for the lab\'s pages')
    listed = {entry if isinstance(entry, str) else next(iter(entry.values())) for entry in section}
    section.extend(src_uri for src_uri in _lab_pages().values() if src_uri not in listed)
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the lab's pages, and the images under ``lab/`` that a page links to."""
    for path, src_uri in _lab_pages().items():
        files.append(File.generated(config, src_uri, abs_src_path=str(path)))
    for file in list(files.documentation_pages()):
        markdown = Path(file.abs_src_path).read_text(encoding="utf-8")
        for image in _linked_images(markdown, _repository_path(file)):
            if files.get_file_from_path(image) is None:
                files.append(File.generated(config, image, abs_src_path=str(ROOT / image)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Rewrite the page's repository-relative links to site links, or to inline code of a path."""
    where = _repository_path(page.file)
    broken: list[str] = []

    def rewrite(match: re.Match[str]) -> str:
        target = match.group(1).strip("<>")
        if EXTERNAL.match(target):
            return match.group(0)
        path, _, anchor = target.partition("#")
        in_repository = posixpath.normpath(posixpath.join(posixpath.dirname(where), path))
        on_site = _site_path(in_repository, files)
        if on_site is not None:
            relative = posixpath.relpath(on_site, posixpath.dirname(page.file.src_uri) or ".")
            link = relative + (f"#{anchor}" if anchor else "")
            start, end = match.span(1)
            whole = match.group(0)
            return whole[: start - match.start()] + link + whole[end - match.start() :]
        if in_repository.startswith("../") or not (ROOT / in_repository).exists():
            broken.append(f"{target!r} ({in_repository})")
        return f"`{in_repository}{'/' if path.endswith('/') else ''}`"

    markdown = _outside_code(markdown, lambda text: LINK.sub(rewrite, text))
    if broken:
        raise PluginError(f"{where} links to what the repository does not hold: {', '.join(broken)}")
    return markdown


def _lab_pages() -> dict[Path, str]:
    """The lab's pages and their site paths, the index first."""
    index = ROOT / LAB_INDEX
    if not index.is_file():
        raise PluginError(f"{LAB_INDEX} (the lab's index, the site's lab/index.md) is missing")
    others = sorted({p for pattern in LAB_PAGES for p in ROOT.glob(pattern)} - {index})
    return {index: "lab/index.md", **{p: p.relative_to(ROOT).as_posix() for p in others}}


def _repository_path(file: File) -> str:
    """Where a site file lives in the repository (``docs/`` pages by their place in ``docs_dir``)."""
    source = Path(file.abs_src_path or "")
    if source.is_relative_to(ROOT / "lab"):
        return source.relative_to(ROOT).as_posix()
    return f"docs/{file.src_uri}"


def _site_path(in_repository: str, files: Files) -> str | None:
    """The site's path of a repository file, or None when the file is not on the site."""
    if in_repository == LAB_INDEX:
        in_repository = "lab/index.md"
    elif in_repository.startswith("docs/"):
        in_repository = in_repository.removeprefix("docs/")
    elif not in_repository.startswith("lab/"):
        return None
    file = files.get_file_from_path(in_repository)
    return None if file is None or file.inclusion.is_excluded() else file.src_uri


def _linked_images(markdown: str, where: str) -> list[str]:
    """Repository paths of the images under ``lab/`` that the page (at ``where``) links to or shows."""
    targets: list[str] = []

    def collect(text: str) -> str:
        targets.extend(match.group(1).strip("<>").partition("#")[0] for match in LINK.finditer(text))
        return text

    _outside_code(markdown, collect)
    images = (
        posixpath.normpath(posixpath.join(posixpath.dirname(where), target))
        for target in targets
        if not EXTERNAL.match(target) and target.lower().endswith(IMAGE_SUFFIXES)
    )
    return [image for image in images if image.startswith("lab/") and (ROOT / image).is_file()]


def _outside_code(markdown: str, edit: Callable[[str], str]) -> str:
    """``edit`` applied to the Markdown's text outside fenced blocks and code spans."""
    out, last = [], 0
    for block in FENCE.finditer(markdown):
        out += [_outside_spans(markdown[last : block.start()], edit), block.group(0)]
        last = block.end()
    return "".join([*out, _outside_spans(markdown[last:], edit)])


def _outside_spans(text: str, edit: Callable[[str], str]) -> str:
    """``edit`` applied to ``text`` with its code spans kept out of reach (a link's text may hold one)."""
    spans: list[str] = []

    def hide(match: re.Match[str]) -> str:
        spans.append(match.group(0))
        return f"\x00{len(spans) - 1}\x00"

    edited = edit(CODE_SPAN.sub(hide, text))
    return re.sub(r"\x00(\d+)\x00", lambda m: spans[int(m.group(1))], edited)
