"""docs/ARCHITECTURE.md's one-way doors and size limits, checked on the source.

- ``spy_env`` imports none of ``agents``, ``trainers``, ``spyrl``; ``agents`` imports neither
  ``trainers`` nor ``spyrl``; ``trainers`` does not import ``spyrl``.
- Size guides, not budgets: a function outside tests stays within 60 lines and a package module within
  400, or is listed below with the reason it is longer; past 100 lines (a function) or 800 (a module) it
  fails whatever the reason. A module that outgrows the guide is split along a real seam, or listed.
- Stages are compared through ``spy_env.Stage`` (no bare 0/1), and policies, engines, trainers and
  their kin are not probed with ``getattr``/``hasattr`` (they declare ``spy_env.policy.Policy`` or
  ``RolloutPolicy``; a name is read with ``spy_env.policy.policy_name``).
- No function takes the whole ``SpyRLConfig`` but the trainer's constructors and the CLI: each takes its
  section; every section is frozen, with help and ``Literal`` choices checked where it is defined.
- Every file path docs/ARCHITECTURE.md names exists, and no code comment or doc cites a file the
  repository does not contain (a note kept outside it, a ``../`` path that leaves the repository, a
  section sign after the name of a document the repository lacks).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("spy_env", "agents", "trainers", "spyrl")
FORBIDDEN = {
    "spy_env": {"agents", "trainers", "spyrl"},
    "agents": {"trainers", "spyrl"},
    "trainers": {"spyrl"},
    "spyrl": set(),
}
CODE = [
    p
    for folder in (*PACKAGES, "benchmarks", "lab/experiments", "examples", "tools")
    for p in sorted((ROOT / folder).rglob("*.py"))
]


def imported_packages(path: Path) -> set[str]:
    """Top-level packages a module imports, anywhere in it (lazy imports inside functions too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_only_go_through_the_one_way_doors(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


FUNCTION_GUIDE, FUNCTION_LIMIT = 60, 100
MODULE_GUIDE, MODULE_LIMIT = 400, 800
# Functions longer than the guide, each with why it is not split ("path:name": reason).
LONG_FUNCTIONS: dict[str, str] = {}
# Package modules longer than the guide, each with why it holds what it holds.
LONG_MODULES = {
    "spy_env/io.py": "every guarded file operation (atomic writes, link-refusing reads, bounded JSON and YAML "
    "parsing, the run lock) in one module, so that file safety is audited in one place",
    "spy_env/env.py": "the environment's documentation page (its docstring, as PettingZoo's pages are) with the "
    "game host and the AEC and parallel wrappers that are its API",
    "spy_env/buffer.py": "the buffer's row schema with the code that writes, reads and checks rows against it",
    "spy_env/corpus.py": "every corpus source with the filters and the held-out split each goes through",
    "spy_env/runner.py": "the batched runner's one loop over stages with the buffer rows it records",
    "agents/decoding.py": "each decoding program (vote modes, answer endings) with the token logic it needs",
    "agents/scripted.py": "the scripted baselines, which share their lexical scoring",
    "agents/vllm_backend.py": "the vLLM backend: its engine, decoding programs and per-token log-probs",
    "trainers/sections.py": "every section of the trainer's config, so that a reader finds each setting, its help "
    "and its check in one place",
    "spyrl/evaluation/leaderboard.py": "the released sets' format: building, loading, verifying and scoring them",
    "spyrl/evaluation/tournament.py": "a tournament's schedule with the metrics and intervals it is scored by",
    "spyrl/integrations/openenv.py": "the OpenEnv server's seat, its protocol checks and the other seats' agents",
    "spyrl/viewer/payload.py": "everything the viewer page shows, rebuilt from buffers, runs and tournaments",
}


def size_problems(
    paths: list[Path], root: Path, long_modules: dict[str, str], long_functions: dict[str, str]
) -> list[str]:
    """Functions and package modules past their guide and not listed with a reason, or past their limit."""
    found = []
    for path in paths:
        where = path.relative_to(root).as_posix()
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                listed = bool(long_functions.get(f"{where}:{node.name}"))
                if lines > FUNCTION_LIMIT or (lines > FUNCTION_GUIDE and not listed):
                    found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
        n = len(source.splitlines())
        in_package = where.split("/")[0] in PACKAGES
        if in_package and (n > MODULE_LIMIT or (n > MODULE_GUIDE and not long_modules.get(where))):
            found.append(f"{where} ({n} lines)")
    return found


def test_functions_and_modules_stay_within_their_guides_or_say_why():
    assert size_problems(CODE, ROOT, LONG_MODULES, LONG_FUNCTIONS) == []
    listed = [*LONG_MODULES, *(name.split(":")[0] for name in LONG_FUNCTIONS)]
    assert [where for where in listed if not (ROOT / where).is_file()] == []  # no reason outlives its module


def test_the_size_check_fails_past_a_guide_unlisted_and_past_a_limit_listed(tmp_path):
    (tmp_path / "spy_env").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(70))
    long = tmp_path / "spy_env" / "long.py"
    long.write_text(f"def f():\n{body}" + "\n" * 400, encoding="utf-8")
    assert size_problems([long], tmp_path, {}, {}) == ["spy_env/long.py:1 f (71 lines)", "spy_env/long.py (471 lines)"]
    assert size_problems([long], tmp_path, {"spy_env/long.py": "why"}, {"spy_env/long.py:f": "why"}) == []
    huge = tmp_path / "spy_env" / "huge.py"
    huge.write_text("def g():\n" + body * 2 + "\n" * 700, encoding="utf-8")
    assert size_problems([huge], tmp_path, {"spy_env/huge.py": "why"}, {"spy_env/huge.py:g": "why"}) == [
        "spy_env/huge.py:1 g (141 lines)",
        "spy_env/huge.py (841 lines)",
    ]


def test_no_bare_stage_numbers_and_no_policy_probes():
    stage_literal = re.compile(
        r"""stage["']?\]?\)?\s*(==|!=)\s*[01]\b|\["stage"\]\s*(==|!=)\s*["'](vote|perform|detect)"""
    )
    probe = re.compile(
        r"(get|has)attr\((self\.|trainer\.)?(policy|policies|engine|learner|performer|voter|detector|trainer)\b"
    )
    found = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
        for path in CODE
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if stage_literal.search(line) or probe.search(line)
    ]
    assert found == []


CITED_PATH = re.compile(r"(?<![\w/.-])((?:\.\./)*[\w-]+(?:/[\w.-]+)*\.(?:md|py|yaml|yml|toml|json|txt))\b")
CITED_SECTION = re.compile(r"\b([A-Z][A-Z_]+)(?:\.md)?\s+\u00a7")  # a document's name, then a section sign
PLACEHOLDERS = {"FILE", "OUT", "PATH", "NAME", "DIR"}  # usage lines: ``tests/FILE.py``, ``--out OUT.md``
OUTPUTS = ("runs/",)  # what commands write (git-ignored), named in docs as their output
MD_LINK_TEXT = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # a link's text may shorten its target: keep the target
DOCS = [*sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "lab").rglob("*.md")), ROOT / "README.md"]


def _repository_files() -> set[Path]:
    """The checkout's files, not walking into virtual environments (CI's are ``.venv-ci*``, gigabytes),
    caches, outputs or build metadata."""
    skip = {".git", "__pycache__", "runs", "build", "dist"}
    found = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [
            d for d in dirs if d not in skip and not d.startswith((".venv", ".cache")) and not d.endswith(".egg-info")
        ]
        found |= {(Path(folder) / f).relative_to(ROOT) for f in files}
    return found


def _comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of a module's ``#`` comments and its docstrings."""
    source = path.read_text(encoding="utf-8")
    out = [(i, line.split("#", 1)[1]) for i, line in enumerate(source.splitlines(), 1) if "#" in line]
    for node in ast.walk(ast.parse(source)):
        documented = isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        if documented and (doc := ast.get_docstring(node, clean=False)) is not None:
            out.append((getattr(node, "lineno", 1), doc))
    return out


def _missing_citations(text: str, where: Path, files: set[Path]) -> list[str]:
    """Files ``text`` (in the file ``where``) cites that the repository lacks: a path is looked up
    from the repository's root and from ``where``'s folder, a bare document name anywhere in it."""
    names = {p.name for p in files}
    found = []
    for cited in CITED_PATH.findall(text):
        if cited.startswith(OUTPUTS) or PLACEHOLDERS & set(re.split(r"[/.]", cited)):
            continue
        local = (ROOT / where.parent / cited).resolve()
        inside = local.is_relative_to(ROOT) and local.relative_to(ROOT) in files
        path_missing = "/" in cited and not inside and Path(cited) not in files
        if path_missing or ("/" not in cited and cited.endswith(".md") and cited not in names):
            found.append(cited)
    found += [f"{doc} \u00a7" for doc in CITED_SECTION.findall(text) if f"{doc}.md" not in names]
    return found


LAB_OR_ISSUE = re.compile(r"(?<![\w/.])(?:lab/|experiments/|docs/experiment)|\bissues? #\d+|\(#\d+\)")


def _lab_or_issue_citations(text: str) -> list[str]:
    """What a library note cites from the lab or the issue tracker (the library must read alone).

    >>> _lab_or_issue_citations("see lab/results/TUNING.md (issue #18); UTS #39 is Unicode's")
    ['lab/', 'issue #18']
    """
    return [m.group(0) for m in LAB_OR_ISSUE.finditer(text)]


def test_library_code_cites_no_lab_page_and_no_issue():
    """The lab lives apart: the packages' comments and docstrings cite neither its pages nor issue numbers."""
    library = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    found = [
        f"{path.relative_to(ROOT)}:{line}: {cited}"
        for path in library
        for line, text in _comments_and_docstrings(path)
        for cited in _lab_or_issue_citations(text)
    ]
    assert found == []
    assert _lab_or_issue_citations("tuned in issue #26's attempt (#20)") == ["issue #26", "(#20)"]


def test_code_comments_and_docs_cite_only_files_of_the_repository():
    """The repository stands alone: what a note outside it says that the code relies on lives in ``docs/``."""
    files = _repository_files()
    found = [
        f"{path.relative_to(ROOT)}:{line}: {cited}"
        for path in [*CODE, *sorted((ROOT / "tests").rglob("*.py"))]
        for line, text in _comments_and_docstrings(path)
        for cited in _missing_citations(text, path.relative_to(ROOT), files)
    ]
    found += [
        f"{path.relative_to(ROOT)}: {cited}"
        for path in DOCS
        for cited in _missing_citations(
            MD_LINK_TEXT.sub(r"\1", path.read_text(encoding="utf-8")), path.relative_to(ROOT), files
        )
    ]
    assert found == []
    # and the check can fail: a note outside the repository, a section of one, a path leaving it
    outside = "see PLAN \u00a74 and ../outside/notes.md, docs/NOPE.md; runs/x.json is an output"
    assert _missing_citations(outside, Path("spy_env/game.py"), files) == [
        "../outside/notes.md",
        "docs/NOPE.md",
        "PLAN \u00a7",
    ]


def test_architecture_doc_names_only_real_files():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:spy_env|agents|trainers|spyrl|tests|benchmarks|examples|docs)/[\w/.-]+)`", text))
    assert paths, "the doc names no files"
    assert sorted(p for p in paths if not (ROOT / p).exists()) == []


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Which package modules each package module imports, anywhere in it (function-level imports
    too). ``from a import b`` names the module ``a.b`` when it is one, else ``a``."""
    paths = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    modules = {module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in modules)
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the module's package, up level - 1 packages
                    base = name.split(".")[: len(name.split(".")) - node.level + is_package]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                for alias in node.names:
                    if f"{target}.{alias.name}" in modules:
                        edges.add(f"{target}.{alias.name}")
                    elif target in modules:
                        edges.add(target)
        edges.discard(name)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                circles.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_the_graph_sees_a_circle():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = import_graph()
    assert "agents.decoding" in graph["agents.hf"], "the import graph misses a plain import"


def test_no_import_circle_among_package_modules():
    """A circle works only through import order and lazy imports; each module should read on its
    own, so the modules of the packages form a directed acyclic graph (package ``__init__``
    re-exports included, their implicit parent import not)."""
    assert import_circles(import_graph()) == []


def test_no_config_field_is_held_by_two_configs():
    """One owner per setting: a field in two sections (or in GameConfig and a trainer section) means one
    copy silently wins (``train_spy_vote`` did) or one name means two things (``beta`` did); a field name
    alone (``--set learning_rate=...``) names its section only because no two share it. A section's own
    sections (``game.rules``, ``rollout.vllm``) count by their settings' flat names, which no section name
    shadows. Nothing has been released, so no field is kept as a deprecated alias either."""
    from dataclasses import fields

    from spy_env.sections import flat_fields, subsections
    from trainers.config import SECTIONS

    owners: dict[str, list[str]] = {}
    for section, cls in SECTIONS.items():
        for name in flat_fields(cls):
            owners.setdefault(name, []).append(section)
    assert {name: where for name, where in owners.items() if len(where) > 1} == {}
    held = {name for cls in SECTIONS.values() for name in subsections(cls)}
    assert held and sorted(held & set(owners)) == []
    helps = {f"{s}.{f.name}": f.metadata.get("help", "") for s, cls in SECTIONS.items() for f in fields(cls)}
    helps |= {
        f"{s}.{name}": f.metadata.get("help", "")
        for s, cls in SECTIONS.items()
        for name, (_, f) in flat_fields(cls).items()
    }
    assert [name for name, text in helps.items() if not text or "deprecated" in text.lower()] == []


def test_every_config_section_is_frozen_and_checks_its_choices_where_it_is_defined():
    """Each section of SpyRLConfig is a frozen dataclass; a value outside a ``Literal`` field's choices
    is refused by the section itself, naming ``SpyRLConfig.<section>.<field>``."""
    import dataclasses

    from spy_env.sections import subsections
    from trainers.config import SECTIONS, SpyRLConfig
    from trainers.validation import literal_choices

    assert SpyRLConfig.__dataclass_params__.frozen
    for name, cls in SECTIONS.items():
        assert cls.__dataclass_params__.frozen, name
        for held, (inner, _) in subsections(cls).items():
            assert inner.__dataclass_params__.frozen, f"{name}.{held}"
            place = inner.PLACE if name == "game" else f"SpyRLConfig.{inner.SECTION}"
            assert place == ("GameConfig" if name == "game" else f"SpyRLConfig.{name}") + f".{held}"
        if name == "game":
            continue
        assert name == cls.SECTION
        for field_name in literal_choices(cls):
            with pytest.raises(ValueError, match=rf"SpyRLConfig\.{name}\.{field_name} must be one of"):
                cls(**{field_name: "no-such-choice"})
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(cls(), dataclasses.fields(cls)[0].name, None)


# SpyRLTrainer's two constructors (a fresh run, a run continued from a checkpoint); and spyrl/commands/train.py
WHOLE_CONFIG_TAKERS = {("trainers/grpo.py", "__init__"), ("trainers/grpo.py", "from_checkpoint")}


def whole_config_takers(files: list[Path], root: Path) -> list[str]:
    """Functions of ``files`` with a parameter annotated ``SpyRLConfig`` (or, in ``trainers/``, a
    ``config`` parameter left untyped or ``Any``), outside the allowed takers."""
    takers = []
    for path in files:
        where = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
                annotation = ast.unparse(arg.annotation) if arg.annotation is not None else None
                whole = annotation is not None and "SpyRLConfig" in annotation
                untyped = where.startswith("trainers/") and arg.arg in ("config", "cfg") and annotation in (None, "Any")
                if (
                    (whole or untyped)
                    and where != "spyrl/commands/train.py"
                    and (where, node.name) not in WHOLE_CONFIG_TAKERS
                ):
                    takers.append(f"{where}:{node.name}({arg.arg}: {annotation})")
    return takers


def test_no_function_takes_the_whole_trainer_config():
    """Every function takes the section it needs (``config.loss``, ``config.rollout``, ...), not the whole
    SpyRLConfig: only the trainer's constructor and the CLI hold it. In ``trainers/`` a parameter named
    ``config`` is also annotated with its section, never left untyped or ``Any``."""
    assert whole_config_takers(CODE, ROOT) == []


def test_the_whole_config_check_sees_a_function_taking_it(tmp_path):
    """The check fails on the forms it forbids."""
    (tmp_path / "trainers").mkdir()
    module = tmp_path / "trainers" / "helper.py"
    module.write_text(
        "def helper(config: SpyRLConfig) -> int:\n    return 0\n\n\ndef other(config) -> int:\n    return 0\n\n\n"
        "def fine(config: LossConfig) -> int:\n    return 0\n",
        encoding="utf-8",
    )
    assert whole_config_takers([module], tmp_path) == [
        "trainers/helper.py:helper(config: SpyRLConfig)",
        "trainers/helper.py:other(config: None)",
    ]


MAX_PARAMETERS = 8


def test_no_function_takes_more_than_eight_parameters():
    """Concepts travel as records: a function of the packages takes at most 8 named parameters
    (``self``/``cls`` and ``*args``/``**kwargs`` not counted)."""
    wide = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
                    names = names[1:] if names[:1] in (["self"], ["cls"]) else names
                    if len(names) > MAX_PARAMETERS:
                        wide.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert wide == []


def test_the_wheel_ships_every_package_and_nothing_else():
    """pyproject names its packages one by one: a new subpackage is listed, and nothing ships by a glob."""
    import tomllib

    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    tree = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for folder in (*PACKAGES, "spyrl_game")
        for p in (ROOT / folder).rglob("__init__.py")
    }
    assert sorted(shipped) == sorted(tree)


def test_no_script_edits_the_import_path():
    """Scripts import the installed packages, and their own folder's modules as plain imports."""
    assert [str(p.relative_to(ROOT)) for p in CODE if "sys.path.insert" in p.read_text(encoding="utf-8")] == []
