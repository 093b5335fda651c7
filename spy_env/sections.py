"""How a configuration is made of sections: frozen dataclasses of settings, each declared with
:func:`setting` (a default and its help) and checked where it is defined.

A section may hold sections of its own (:func:`section`: ``GameConfig.rules``, ``SpyRLConfig.rollout.vllm``).
Each of their settings also has a flat name, unique in the whole configuration: its own name, after the
section's ``prefix`` (``n_players`` is ``rules.n_players``; ``vllm_server_url`` is ``vllm.server_url``).
A mapping may name a setting by its section (``{"rules": {"n_players": 4}}``), a dotted key
(``"rules.n_players"``) or its flat name alone; :func:`flatten` reads any mix of them into flat names,
refusing an unknown name or one given twice, and :func:`assemble` builds the sections back.
"""

from __future__ import annotations

import contextlib
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import Field, field, fields, replace
from typing import Any

__all__ = [
    "assemble",
    "build",
    "check_types",
    "coerce_floats",
    "flat_fields",
    "flat_name",
    "flat_values",
    "flatten",
    "section",
    "setting",
    "shown",
    "subsections",
]


def setting(default: Any, help: str) -> Any:
    """A section field: its default and its help (``--print-config`` and YAML comments show it)."""
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def section(cls: type, help: str, prefix: str = "") -> Any:
    """A field holding the section ``cls`` (default: its defaults); ``prefix`` starts its settings' flat names."""
    return field(default_factory=cls, metadata={"help": help, "section": cls, "prefix": prefix})


def subsections(cls: type) -> dict[str, tuple[type, str]]:
    """The sections ``cls`` holds: field name -> (section class, prefix of its flat names)."""
    return {f.name: (f.metadata["section"], f.metadata["prefix"]) for f in fields(cls) if "section" in f.metadata}


def flat_fields(cls: type) -> dict[str, tuple[str | None, Field]]:
    """Every setting of ``cls`` by its flat name: (the section holding it, None for ``cls`` itself; its field)."""
    out: dict[str, tuple[str | None, Field]] = {}
    for f in fields(cls):
        if "section" in f.metadata:
            out.update({f.metadata["prefix"] + g.name: (f.name, g) for g in fields(f.metadata["section"])})
        else:
            out[f.name] = (None, f)
    return out


def flat_values(config: Any) -> dict[str, Any]:
    """``config``'s settings by flat name, in the order of its fields (a section's in its place)."""
    out = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if "section" in f.metadata:
            out.update({f.metadata["prefix"] + g.name: getattr(value, g.name) for g in fields(value)})
        else:
            out[f.name] = value
    return out


def flat_name(cls: type, key: str) -> str:
    """The flat name of ``key`` (``"rules.n_players"`` -> ``"n_players"``); a key that names no setting
    of ``cls`` as itself, for :func:`flatten` to refuse by name."""
    head, dot, rest = key.partition(".")
    sections = subsections(cls)
    if dot and head in sections:
        inner, prefix = sections[head]
        if rest in {f.name for f in fields(inner)}:
            return prefix + rest
    return key


def flatten(cls: type, values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``values`` (flat names, sections as mappings, dotted keys, in any mix) as flat names.

    Raises ``ValueError`` naming an unknown key, or a setting given twice (``n_players`` and
    ``rules.n_players``), as ``<where>: ...``.
    """
    if not isinstance(values, Mapping):
        raise ValueError(f"{where} must be a mapping of its fields, got {type(values).__name__}")
    known, sections = flat_fields(cls), subsections(cls)
    out: dict[str, Any] = {}
    unknown = []
    for key, value in values.items():
        head, dot, rest = key.partition(".") if isinstance(key, str) else (key, "", "")
        if head in sections and (dot or isinstance(value, Mapping)):
            inner, prefix = sections[head]
            named = {
                prefix + k: v for k, v in flatten(inner, {rest: value} if dot else value, f"{where}.{head}").items()
            }
        elif key in sections and isinstance(value, sections[key][0]):
            named = {sections[key][1] + f.name: getattr(value, f.name) for f in fields(value)}
        elif key in sections:
            raise ValueError(f"{where}.{key} must be a mapping of its fields, got {type(value).__name__}")
        elif key in known:
            named = {key: value}
        else:
            unknown.append(key)
            continue
        if twice := sorted(set(named) & set(out)):
            raise ValueError(f"{where}: {twice} given twice (by flat name and by section)")
        out.update(named)
    if unknown:
        raise ValueError(f"{where}: unknown fields {sorted(unknown, key=str)}; known: {sorted([*known, *sections])}")
    return out


def assemble(cls: type, given: Mapping[str, Any], settings: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``cls``'s sections from ``given`` (section name -> the section, a mapping of its fields, or None for
    its defaults) with ``settings`` (flat names) set on them: a setting named both ways takes the flat value,
    as :func:`dataclasses.replace` gives it."""
    known = flat_fields(cls)
    if unknown := sorted(set(settings) - set(known), key=str):
        raise ValueError(f"{where}: unknown fields {unknown}; known: {sorted(known)}")
    out = {}
    for name, (inner, prefix) in subsections(cls).items():
        base = given.get(name)
        theirs = {k[len(prefix) :]: v for k, v in settings.items() if known[k][0] == name}
        if base is None:
            out[name] = inner(**theirs)
        elif isinstance(base, Mapping):
            out[name] = inner(**{**flatten(inner, base, f"{where}.{name}"), **theirs})
        elif isinstance(base, inner):
            out[name] = replace(base, **theirs) if theirs else base
        else:
            raise ValueError(
                f"{where}.{name} must be a {inner.__name__} or a mapping of its fields, got {type(base).__name__}"
            )
    return out


def build(cls: type, values: Mapping[str, Any], where: str) -> Any:
    """``cls`` from settings by flat name, each section it holds built from its own."""
    known = flat_fields(cls)
    if unknown := sorted(set(values) - set(known), key=str):
        raise ValueError(f"{where}: unknown fields {unknown}; known: {sorted(known)}")
    plain = {k: v for k, v in values.items() if known[k][0] is None}
    held = {k: v for k, v in values.items() if known[k][0] is not None}
    return cls(**plain, **assemble(cls, {}, held, where))


def coerce_floats(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (flat names) with strings in ``cls``'s float fields read as numbers (YAML 1.1 reads
    ``1e-6``, without a dot, as a string); anything else is left for validation to name."""
    floats = {name for name, (_, f) in flat_fields(cls).items() if "float" in str(f.type)}
    out = dict(values)
    for name in floats & set(out):
        if isinstance(out[name], str):
            with contextlib.suppress(ValueError):  # not a number: validation names the field
                out[name] = float(out[name])
    return out


_TYPE_CHECKS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "float": ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "dict": ("a mapping", lambda v: isinstance(v, Mapping)),
    "list": ("a list", lambda v: isinstance(v, list)),
    "None": ("None", lambda v: v is None),
}


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, 200, 200


def shown(value: Any) -> str:
    """``repr(value)`` bounded in depth and length, for error messages about untrusted values (a
    YAML alias bomb's full ``repr`` is exponential)."""
    text = _SHOWN.repr(value)
    return text if len(text) <= 300 else text[:300] + "..."


def check_types(config: Any, where: str | None = None) -> None:
    """Raise ``ValueError`` naming the first field whose value does not have its annotated type, as
    ``<where>.<field>`` (default: the class's name).

    Runs before range checks, so ``"abc"``, ``1.5`` or ``True`` for an ``int`` field, or a list for
    a ``str`` field, is refused by name instead of failing later (after side effects). Annotations
    this does not understand (``Mapping[str, str]``, ...) are left to the field's own validation.
    """
    for f in fields(config):
        parts = [part.strip() for part in str(f.type).split("|")]
        if not all(part in _TYPE_CHECKS for part in parts):
            continue
        value = getattr(config, f.name)
        if not any(_TYPE_CHECKS[part][1](value) for part in parts):
            expected = " or ".join(_TYPE_CHECKS[part][0] for part in parts)
            raise ValueError(f"{where or type(config).__name__}.{f.name} must be {expected}, got {shown(value)}")
