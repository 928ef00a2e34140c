"""Names that other packages add to fedlight through entry points.

A package adds a method, an aggregator, a backbone, a client schedule or a round plug-in by
declaring it in its ``pyproject.toml``; nothing in fedlight is edited::

    [project.entry-points."fedlight.methods"]
    my_method = "my_package.module:MyMethod"

Groups: ``fedlight.methods`` (a ``FederatedModule`` subclass), ``fedlight.aggregators`` (an
``Aggregator`` subclass), ``fedlight.backbones`` (``(channels, image_size) -> nn.Module``),
``fedlight.schedules`` (``(ScheduleContext) -> ClientSchedule``), ``fedlight.plugins`` (a
``RoundPlugin`` built as ``cls(PluginContext, **options)``) and ``fedlight.attacks`` (an ``Attack``
subclass built with ``faults.attack_options``). A :class:`Table` holds the
built-in names and finds the installed ones when first asked for a name it lacks or for its
list; a built-in name wins over an entry point of the same name, with a one-line warning the
first time the shadowed name is used (a package's ``median`` never silently trains as fedlight's).
Its one-line description is
the first paragraph of the object's docstring, read from its module's source file when it can be
found there, so ``fedlight methods`` imports neither torch nor any package it lists.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import re
import sys
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Callable, Generic, TypeVar

from fedlight import installed_entry_points
from fedlight.errors import UserError

T = TypeVar("T")


class Table(Mapping[str, T], Generic[T]):
    """Built-in ``name -> object`` entries, then those of the installed entry-point ``group``.

    Args:
        group: the entry-point group, e.g. ``fedlight.methods``.
        builtins: fedlight's own entries: the object, or the ``module:attr`` string that names it.
        kind: what is wrong with a loaded entry point's object for this group (``"a int, not a
            class"``), or None: an object of the wrong kind is refused where it is loaded.
    """

    def __init__(self, group: str, builtins: dict[str, T | str],
                 kind: Callable[[Any], str | None] = lambda obj: None) -> None:
        self.group, self.builtins, self.kind = group, dict(builtins), kind
        self._found: dict[str, importlib.metadata.EntryPoint] | None = None
        self._shadowed: dict[str, str] = {}  # built-in name -> the ``module:attr`` of the entry point it hides
        self._warned: set[str] = set()
        self._loaded: dict[str, T] = {}

    def _entry_points(self) -> dict[str, importlib.metadata.EntryPoint]:
        if self._found is None:
            found = installed_entry_points.in_group(self.group)  # a package's malformed file: skipped, named
            self._found = {ep.name: ep for ep in found if ep.name not in self.builtins}
            self._shadowed = {ep.name: ep.value for ep in found if ep.name in self.builtins}
        return self._found

    def _warn_if_shadowed(self, name: str) -> None:
        """Say once, on stderr, that the built-in ``name`` hides an installed entry point of that name."""
        hidden = self.hides(name)
        if hidden is None or name in self._warned:
            return
        self._warned.add(name)
        from fedlight.engine.run.launch import is_child  # torch-free; the ranks it started leave messages to rank 0

        if not is_child():
            print(f"fedlight: warning: {self.group} entry point '{name}' ({hidden}) is hidden by "
                  f"fedlight's built-in '{name}', which is used; rename the entry point in the package that "
                  "declares it to use it", file=sys.stderr)

    def __getitem__(self, name: str) -> T:
        if name in self.builtins:
            self._warn_if_shadowed(name)
            entry = self.builtins[name]
            if isinstance(entry, str):  # "module:attr" (fedlight.catalog): imported on first use
                module, _, attr = entry.partition(":")
                entry = self.builtins[name] = getattr(importlib.import_module(module), attr)
            return entry
        if name not in self._loaded:
            ep = self._entry_points()[name]  # KeyError for an unknown name, as a mapping should
            try:
                loaded = ep.load()
            except (Exception, SystemExit) as exc:  # a broken third-party package (one that exits on import, too)
                raise UserError(f"{self.group} entry point '{name}' ({ep.value}) failed to load "
                                f"({type(exc).__name__}: {exc}); fix or uninstall the package that declares it") from None
            wrong = self.kind(loaded)
            if wrong:
                raise UserError(f"{self.group} entry point '{name}' ({ep.value}) is {wrong}; fix or uninstall the "
                                "package that declares it")
            self._loaded[name] = loaded
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in self.builtins or name in self._entry_points()

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({*self.builtins, *self._entry_points()}))

    def __len__(self) -> int:
        return len({*self.builtins, *self._entry_points()})

    @contextmanager
    def building(self, name: str, key: str) -> Iterator[None]:
        """Within the block, an entry point's constructor or factory that raises is one line naming the
        recipe ``key`` (``plugins.my_plugin``), the entry point and its error; a built-in's error is a
        bug of fedlight and goes on as it was.

        Raises:
            UserError: the entry point ``name``'s code raised (a ``UserError`` of its own goes on unchanged).
        """
        try:
            yield
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever a third-party package raises
            if name in self.builtins:
                raise
            said = (str(exc).strip().splitlines() or [""])[0]
            raise UserError(f"{key}: {self.group} entry point '{name}' ({self.origin(name)}) raised "
                            f"{type(exc).__name__}: {said}; fix or uninstall the package that declares it") from None

    def hides(self, name: str) -> str | None:
        """The ``module:attr`` of the installed entry point that the built-in ``name`` hides, or None."""
        self._entry_points()
        return self._shadowed.get(name)

    def origin(self, name: str) -> str:
        """``fedlight``, or the ``module:attr`` an entry point names."""
        return "fedlight" if name in self.builtins else self._entry_points()[name].value

    def target(self, name: str) -> str | None:
        """The ``module:attr`` that defines ``name``, or None for a built-in given as the object itself."""
        entry = self.builtins[name] if name in self.builtins else self._entry_points()[name].value
        return entry if isinstance(entry, str) else None

    def description(self, name: str) -> str:
        """The first paragraph of the entry's docstring, as one line: read from the source without
        importing it where the ``module:attr`` is a class or function defined there, else from the
        imported object."""
        target = self.target(name)
        doc = source_docstring(target) if target else None
        if doc is None:
            doc = getattr(self[name], "__doc__", None) or ""
        return " ".join(line.strip() for line in doc.strip().split("\n\n")[0].splitlines())


def source_docstring(target: str) -> str | None:
    """The docstring of the class or function ``module:attr`` as its source file spells it, None where
    the file or a definition of that name is not found (an alias, a compiled module): nothing is
    imported but the module's parent packages."""
    module, _, attr = target.partition(":")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    try:
        with open(spec.origin, encoding="utf-8") as source:
            tree = ast.parse(source.read())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == attr.strip():
            return ast.get_docstring(node) or ""
    return None


def subclass_of(base: str) -> Callable[[Any], str | None]:
    """A ``Table`` kind: a subclass of the class ``base`` names (``module:attr``, imported when asked)."""
    def problem(obj: Any) -> str | None:
        module, _, attr = base.partition(":")
        if isinstance(obj, type) and issubclass(obj, getattr(importlib.import_module(module), attr)):
            return None
        return f"{_kind(obj)}, not a subclass of {attr}"
    return problem


def a_callable(obj: Any) -> str | None:
    """A ``Table`` kind: something to call (a factory)."""
    return None if callable(obj) else f"{_kind(obj)}, not a factory to call"


def _kind(obj: Any) -> str:
    return f"the class {obj.__name__}" if isinstance(obj, type) else f"a {type(obj).__name__}"


def first_sentence(text: str) -> str:
    """``text`` up to its first full stop that ends a sentence: one followed by a capital, outside
    parentheses and ``code`` (``et al. 2018``, ``e.g. the``, ``(Sec. IV)`` end none)."""
    for match in re.finditer(r"\.\s+(?=[A-Z])", text):
        before = text[:match.start()]
        if before.count("(") == before.count(")") and before.count("``") % 2 == 0:
            return before + "."
    return text


def entry_text(head: str, text: str, columns: int | None) -> str:
    """``head`` then ``text``, wrapped to ``columns`` under itself (None: one line, as a pipe or grep wants)."""
    if columns is None:
        return head + text
    return textwrap.fill(text, max(columns, len(head) + 40), initial_indent=head, subsequent_indent=" " * len(head),
                         break_long_words=False, break_on_hyphens=False)


def _origin(table: Table[Any], name: str) -> str:
    """Where ``name`` comes from when not fedlight itself, or which entry point the built-in hides."""
    hidden = table.hides(name)
    return (f"  [{table.origin(name)}]" if table.origin(name) != "fedlight"
            else f"  [hides the entry point {hidden}]" if hidden else "")


def describe(tables: dict[str, Table[Any]], columns: int | None = None) -> str:
    """Every name of every table with the first sentence of its description (``fedlight methods``),
    wrapped to ``columns`` (None: one line each)."""
    lines, shortened = [], False
    for title, table in tables.items():
        lines.append(f"{title} ({table.group}):")
        width = max(map(len, table), default=0)
        if not width:
            lines.append("  none installed")
        for name in table:
            text = table.description(name)
            shortened |= first_sentence(text) != text
            lines.append(entry_text(f"  {name:<{width}}  ", first_sentence(text) + _origin(table, name), columns))
    if shortened:
        lines.append("(each description's first sentence; fedlight methods NAME shows all of it)")
    return "\n".join(lines)


def describe_name(tables: dict[str, Table[Any]], name: str, columns: int | None = None) -> str:
    """The whole description of ``name`` in every table that has it (``scaffold`` is a method and an
    aggregator), wrapped to ``columns`` (None: one line each).

    Raises:
        UserError: no table has ``name``.
    """
    found = [(title, table) for title, table in tables.items() if name in table]
    if not found:
        every = sorted({n for table in tables.values() for n in table})
        raise UserError(f"fedlight methods {name}: nothing is named so; valid names: {', '.join(every)}")
    return "\n".join(f"{name} ({title}, {table.group}):\n"
                     + entry_text("  ", table.description(name) + _origin(table, name), columns)
                     for title, table in found)
