"""The registries: :class:`Registry`, the name → strategy map of every setting that picks a strategy by
name, and the backend registry, every kind of spec that :func:`agents.load` turns into a policy.

A :class:`Registry` keeps its names in registration order and refuses a name twice (as verl's
``register_adv_est`` does). A setting's string value (``vote_mode="constrained"``,
``rollout.generation="hf"``) is looked up in its registry (:meth:`Registry.of`), and the code asks the
registered object what it can do; it never compares the name. The packages' registries:
:data:`agents.decoding.VOTE_MODES` and :data:`agents.decoding.ANSWER_MODES`, the trainer's rollout
engines (``trainers.engines``), performing rewards (``trainers.samples``), mini-batch units
(``trainers.update``), loss aggregations, vote gradients and advantage groupings, and
:data:`BACKENDS` below.

A backend is a name (the part of a spec before ``:``), the form users write (``hf:PATH_OR_ID``),
a one-line help, which arguments the form accepts, and a factory. ``agents.load``, the table in
``agents``' docstring, the ``spyrl`` command line (which options a seat's spec gets, and its help
texts) and docs/GUIDE.md's agents table all read :data:`BACKENDS`, so a new backend is one file that
defines its policy and registers it::

    @register_backend("echo", spec="echo:TEXT", help="says TEXT every time", accepts=some_argument)
    def load_echo(argument: str, *, seed: int | None = None, **kwargs) -> Policy:
        return EchoPolicy(argument, **kwargs)

A factory is called as ``factory(argument, seed=seed, **kwargs)``; an ``llm`` backend's factory
as ``factory(argument, sampling=sampling, **kwargs)``, where ``sampling`` is the caller's
:class:`~agents.sampling.SamplingParams` (default ones when none was given) carrying ``seed``
unless it had its own. Heavy dependencies belong inside the factory, imported when a spec of
the backend is loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from agents.sampling import SamplingParams
from spy_env.policy import Policy

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendFactory",
    "Registry",
    "any_argument",
    "backend_of",
    "backends_table",
    "load",
    "no_argument",
    "register_backend",
    "some_argument",
    "spec_forms",
    "spec_problem",
]

BackendFactory = Callable[..., Policy]
T = TypeVar("T")
_NOTHING: Any = object()


class Registry(dict[str, T], Generic[T]):
    """The strategies of one setting by name, in registration order (a ``dict``: ``name in``, ``[name]``,
    iteration over the names).

    ``setting`` is the name of the setting that chooses among them (``"vote_mode"``); errors name it.

    >>> modes = Registry("mode")
    >>> modes.register("fast", 1)
    1
    >>> @modes.register("slow")
    ... def slow(): ...
    >>> list(modes), modes.of("fast")
    (['fast', 'slow'], 1)
    >>> modes.register("fast", 2)
    Traceback (most recent call last):
    ...
    ValueError: a mode named 'fast' is already registered
    >>> modes.of("medium")
    Traceback (most recent call last):
    ...
    ValueError: unknown mode 'medium'; expected one of ['fast', 'slow']
    """

    def __init__(self, setting: str) -> None:
        super().__init__()
        self.setting = setting

    def register(self, name: str, entry: Any = _NOTHING) -> Any:
        """Make ``entry`` the strategy ``name`` and return it; without ``entry``, a decorator that registers
        what it decorates (as ``functools.singledispatch``'s ``register``). A registered name raises
        ``ValueError``: a second strategy never silently replaces the first."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.setting} is registered under a non-empty string, got {name!r}")
        if entry is _NOTHING:
            return lambda decorated: self.register(name, decorated)
        if name in self:
            raise ValueError(f"a {self.setting} named {name!r} is already registered")
        self[name] = entry
        return entry

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name)

    def of(self, name: str) -> T:
        """The strategy called ``name``, or a ``ValueError`` naming the setting and the registered names."""
        if name not in self:
            raise ValueError(f"unknown {self.setting} {name!r}; expected one of {sorted(self)}")
        return self[name]


def no_argument(argument: str) -> bool:
    """The spec is the bare name (``smollm2``)."""
    return not argument


def any_argument(argument: str) -> bool:
    """The spec may carry anything after ``:``, or nothing (``random``, ``random:7``)."""
    return True


def some_argument(argument: str) -> bool:
    """The spec must carry something after ``:`` (``hf:PATH_OR_ID``)."""
    return bool(argument)


@dataclass(frozen=True)
class Backend:
    """One registered kind of agent spec.

    ``llm``: the policy samples text and takes ``sampling`` (the CLI's ``--temperature``,
    ``--top-p``, ``--max-new-tokens``). ``decoding``: it also runs :mod:`agents.decoding`'s vote
    and answer options and batches locally (the CLI's ``--vote-mode``, ``--think-tokens``,
    ``--abstain``, ``--answer``, ``--batch-size``). ``loading_note`` is shown while it loads.
    ``check(argument)`` says what is wrong with an argument the form accepts, without building
    anything (a seed that is not a number, a local model folder that does not exist), or None.
    """

    name: str
    spec: str
    help: str
    factory: BackendFactory = field(repr=False, compare=False)
    accepts: Callable[[str], bool] = field(default=no_argument, repr=False, compare=False)
    llm: bool = False
    decoding: bool = False
    loading_note: str = ""
    check: Callable[[str], str | None] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name or ":" in self.name or not self.name.isprintable():
            raise ValueError(f"a backend name is a non-empty word without ':', got {self.name!r}")
        if self.spec.partition(":")[0] != self.name:
            raise ValueError(f"backend {self.name!r}: its spec form must start with its name, got {self.spec!r}")
        if self.decoding and not self.llm:
            raise ValueError(f"backend {self.name!r}: decoding options need an llm backend")


BACKENDS: Registry[Backend] = Registry("backend")


def register_backend(
    name: str,
    *,
    help: str,
    spec: str | None = None,
    accepts: Callable[[str], bool] = no_argument,
    llm: bool = False,
    decoding: bool = False,
    loading_note: str = "",
    check: Callable[[str], str | None] | None = None,
) -> Callable[[BackendFactory], BackendFactory]:
    """Decorator that makes a factory loadable as ``agents.load("NAME[:ARGUMENT]")``.

    ``spec`` is the form shown to users (default: the bare name); ``accepts(argument)`` says
    whether the part after ``:`` fits (a spec that does not fit is an unknown spec).
    """

    def wrap(factory: BackendFactory) -> BackendFactory:
        BACKENDS.register(name, Backend(name, spec or name, help, factory, accepts, llm, decoding, loading_note, check))
        return factory

    return wrap


def backend_of(spec: str) -> Backend | None:
    """The backend a spec names (by the part before ``:``), or None."""
    return BACKENDS.get(spec.partition(":")[0]) if isinstance(spec, str) else None


def spec_forms(backends: Iterable[Backend] | None = None) -> str:
    """``"random, heuristic, hf:PATH_OR_ID, ..."``: the forms of ``backends`` (default: every
    registered one), in registration order."""
    return ", ".join(b.spec for b in (BACKENDS.values() if backends is None else backends))


def backends_table() -> str:
    """The registered backends as a Markdown table (docs/GUIDE.md's agents table is this text)."""
    lines = ["| spec | what |", "|---|---|"]
    lines += [f"| `{b.spec}` | {b.help} |" for b in BACKENDS.values()]
    return "\n".join(lines)


def spec_problem(spec: Any) -> str | None:
    """What :func:`load` would refuse in ``spec``, found without building anything, or None.

    >>> spec_problem("heuristic"), spec_problem("random:3"), spec_problem("hf:Qwen/Qwen3-4B")
    (None, None, None)
    >>> spec_problem("random:x")
    "agent spec 'random:x': the part after ':' must be an integer seed"
    """
    if not isinstance(spec, str) or not spec:
        return f"agent spec must be a non-empty string, got {spec!r}"
    backend = backend_of(spec)
    argument = spec.partition(":")[2]
    if backend is None or not backend.accepts(argument):
        return f"unknown agent spec {spec!r}; known forms: {spec_forms()}"
    return backend.check(argument) if backend.check is not None else None


def load(spec: str, *, seed: int | None = None, sampling: SamplingParams | None = None, **kwargs: Any) -> Policy:
    """Build a policy from a spec string (see :data:`BACKENDS` and ``agents``' docstring).

    ``seed`` seeds scripted agents and, for LLMs, the sampling (unless ``sampling`` has one);
    other keyword arguments go to the backend's factory.
    """
    problem = spec_problem(spec)
    if problem is not None:
        raise ValueError(problem)
    backend, argument = backend_of(spec), spec.partition(":")[2]
    if not backend.llm:
        return backend.factory(argument, seed=seed, **kwargs)
    sampling = sampling or SamplingParams()
    if seed is not None and sampling.seed is None:
        sampling = replace(sampling, seed=seed)
    return backend.factory(argument, sampling=sampling, **kwargs)
