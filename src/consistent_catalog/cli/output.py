"""The CLI's one output layer: text tables for people or stable JSON for scripts, chosen once per command.

Also the pieces every command shares: the catalog context, ``--output``, and the decorator that
turns library errors into one line on stderr and exit code 1.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from rich.cells import cell_len

from consistent_catalog.cli.hints import with_hint
from consistent_catalog.exceptions import CatalogUnavailableError, ConsistentCatalogError
from consistent_catalog.util.time import fmt_barrier, fmt_duration, fmt_ms

__all__ = [
    "Col",
    "Context",
    "Output",
    "cell_text",
    "command_errors",
    "fmt_barrier",
    "fmt_duration",
    "fmt_ms",
    "note",
    "note_width",
    "output_option",
    "table_out",
]

F = TypeVar("F", bound=Callable[..., Any])

OUTPUT = click.Choice(["text", "json"])
TEXT_COLUMNS = {"sources", "note", "reads", "feeds", "sinks", "tables", "held by", "why it stays", "reason"}
"""Columns given by name that wrap at spaces; every other one is never cut (ids, names, paths, counts)."""


class Output:
    """Where a command's result goes: ``emit(payload, render_text)`` prints JSON or calls the text renderer."""

    def __init__(self, fmt: str) -> None:
        self.json = fmt == "json"

    def emit(self, payload: Any, render_text: Callable[[], None]) -> None:
        if self.json:
            click.echo(json.dumps(payload, indent=None if not sys.stdout.isatty() else 2))
        else:
            render_text()


class Context:
    """Global options and the catalog, loaded on first use."""

    def __init__(self, catalog_name: str | None, output: str, verbose: bool) -> None:
        self.catalog_name = catalog_name
        self.output = output
        self.verbose = verbose
        self._catalog: Any = None

    @property
    def catalog(self) -> Any:
        if self._catalog is None:
            from consistent_catalog import ConsistentCatalog

            self._catalog = ConsistentCatalog.load(self.catalog_name)
        return self._catalog

    def out(self, output: str | None = None) -> Output:
        """The output of this command: its own ``--output`` if given, else the global one."""
        return Output(output or self.output)


#: sysexits' EX_TEMPFAIL, "try again later": a catalog unavailable past its retry deadline (and ``wait``'s timeout)
EX_TEMPFAIL = 75


def command_errors(func: F) -> F:
    """Turn library errors into one line on stderr and exit code 1 (75 for a catalog that stayed unavailable;
    a traceback only with --verbose)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context().find_object(Context)
        try:
            return func(*args, **kwargs)
        except ConsistentCatalogError as exc:
            if ctx is not None and ctx.verbose:
                traceback.print_exc()
            click.echo(f"error: {with_hint(exc)}", err=True)
            sys.exit(EX_TEMPFAIL if isinstance(exc, CatalogUnavailableError) else 1)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # anything unexpected: still one line, but say how to see more
            if ctx is not None and ctx.verbose:
                traceback.print_exc()
            click.echo(
                f"error: unexpected {type(exc).__name__}: {exc} (rerun with --verbose for the traceback)", err=True
            )
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def output_option(func: F) -> F:
    """``--output`` is accepted after the command too (``resolve ... --output json``)."""
    return click.option("--output", "-o", "output", type=OUTPUT, default=None, help="text tables or stable JSON")(func)


@dataclass(frozen=True)
class Col:
    """A column of a text table, and how it may give way when the terminal is narrow.

    ``kind``: ``id`` is never cut or wrapped (snapshot ids, tags, table and job names, counts);
    ``barrier`` is epoch ms shown with its UTC time beside it (the time moves under the number when
    narrow; the number is never cut); ``time`` is epoch ms as a UTC time (date and time may take two
    lines); ``text`` wraps at spaces, never inside a word (so ids inside it stay whole).
    ``drop`` > 0 marks a decorative column: when the table does not fit, these are left out, the
    highest ``drop`` first (and named under the table) before the table turns vertical. ``note`` is free
    text that may run long (a refusal, why a table is held back): its cell shows ``[n]`` and the text is
    printed under the table as ``[n] text``, wrapped to the terminal (``note_width``), so that a long
    note neither widens every row nor, piped, makes a line hundreds of characters long.
    """

    header: str
    kind: str = "id"
    drop: int = 0


def cell_text(value: Any, kind: str = "id") -> str:
    """How a value reads in text output: ``-`` for None, ``yes``/``no`` for booleans, times beside barriers."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if kind == "barrier" and isinstance(value, int):
        return fmt_barrier(value)
    if kind == "time" and isinstance(value, int):
        return fmt_ms(value)
    return str(value)


def _words(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


def _lines(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def _narrow_barrier(text: str) -> str:
    """``1795384356798 (2026-11-22 22:12:36.798Z)`` as two lines: the number, then the time."""
    number, sep, rest = text.partition(" ")
    return f"{number}\n{rest}" if sep else text


class _Layout:
    """Column widths for a terminal ``width`` (None: unbounded): every column at least as wide as its
    longest unbreakable piece, so no value is ever cut; None when the table cannot fit."""

    def __init__(self, columns: list[Col], cells: list[list[str]]) -> None:
        self.columns = columns
        self.cells = cells
        self.natural: list[int] = []
        self.minimum: list[int] = []
        for i, column in enumerate(columns):
            values = [row[i] for row in cells]
            natural = max([cell_len(column.header), *(_lines(v) for v in values)])
            if column.kind == "id":  # the header may wrap at its spaces, a value never
                minimum = max([_words(column.header), *(_lines(v) for v in values)])
            elif column.kind == "barrier":
                minimum = max([cell_len(column.header), *(_lines(_narrow_barrier(v)) for v in values)])
            else:
                minimum = max([_words(column.header), *(_words(v) for v in values)])
            self.natural.append(natural)
            self.minimum.append(minimum)

    @staticmethod
    def overhead(n: int) -> int:
        return 3 * n + 1  # borders and one space of padding either side of each cell

    def widths(self, visible: list[int], width: int | None) -> list[int] | None:
        natural = [self.natural[i] for i in visible]
        if width is None or sum(natural) + self.overhead(len(visible)) <= width:
            return natural
        room = width - self.overhead(len(visible))
        widths = [self.minimum[i] for i in visible]
        if sum(widths) > room:
            return None
        spare = room - sum(widths)
        # restore the columns that need least to be whole again first (a barrier back on one line, ...)
        for k in sorted(range(len(visible)), key=lambda k: natural[k] - widths[k]):
            grow = min(natural[k] - widths[k], spare)
            if self.columns[visible[k]].kind in ("barrier", "time") and grow < natural[k] - widths[k]:
                continue  # a barrier or time is on one line or two: a width in between helps nothing
            widths[k] += grow
            spare -= grow
        return widths


def _terminal_width() -> int | None:
    """The terminal's width; None (unbounded: nothing wraps) when stdout is not a terminal."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


PIPED_NOTE_WIDTH = 100
"""Where notes under a table wrap when stdout is not a terminal and ``COLUMNS`` does not say."""


def note_width() -> int:
    """The width notes under a table wrap to: the terminal's; piped, ``COLUMNS`` or ``PIPED_NOTE_WIDTH``. The
    table's rows stay unbounded when piped (one line each, for grep); only free text wraps."""
    width = _terminal_width()
    if width is not None:
        return width
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) >= 40 else PIPED_NOTE_WIDTH


def note(text: str, *, indent: str = "") -> None:
    """Print ``text`` under a table, wrapped at spaces to ``note_width()`` (never inside a word: ids, barriers and
    paths stay whole on one line)."""
    for line in _fill(text, note_width(), indent):
        click.echo(line)


def table_out(title: str, columns: list[Col | str], rows: list[list[Any]], *, width: int | None = None) -> None:
    """Print rows as a table that fits the terminal without ever cutting a value.

    Wide tables first wrap text at spaces and put barrier times under their numbers, then leave out
    decorative columns (named under the table), and finally print one ``key: value`` block per row.
    Not a terminal: no width limit for the rows (one line each). Notes (``Col`` kind ``note``) go under
    the table, numbered, wrapped to the width (piped: ``note_width()``).
    """
    width = _terminal_width() if width is None else width
    columns = [Col(c, "text" if c in TEXT_COLUMNS else "id") if isinstance(c, str) else c for c in columns]
    notes: list[str] = []

    def cell(value: Any, column: Col) -> str:
        if column.kind == "note" and value not in (None, ""):
            notes.append(str(value))
            return f"[{len(notes)}]"
        return cell_text(value, column.kind)

    cells = [[cell(v, c) for v, c in zip(row, columns)] for row in rows]
    _table(title, columns, cells, width)
    for number, text in enumerate(notes, 1):
        marker = f"[{number}] "
        for line in _fill(marker + text, width or note_width(), " " * len(marker)):
            click.echo(line)


def _table(title: str, columns: list[Col], cells: list[list[str]], width: int | None) -> None:
    """``table_out``'s table of text cells: as wide as ``width`` allows (None: unbounded)."""
    layout = _Layout(columns, cells)
    visible = list(range(len(columns)))
    dropped: list[str] = []
    widths = layout.widths(visible, width)
    while widths is None:
        decorative = [i for i in visible if columns[i].drop]
        if not decorative:
            _vertical(title, columns, cells, width)
            return
        gone = max(decorative, key=lambda i: (columns[i].drop, i))
        visible.remove(gone)
        dropped.append(columns[gone].header)
        widths = layout.widths(visible, width)

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, show_lines=False)
    narrow: set[int] = set()
    for i, w in zip(visible, widths):
        column = columns[i]
        if column.kind == "barrier" and w < layout.natural[i]:
            narrow.add(i)
        solid = column.kind == "id" and any(len(row[i].split()) > 1 for row in cells)  # an id with a space
        table.add_column(Text(column.header), width=w, no_wrap=solid, overflow="fold")
    for row in cells:
        table.add_row(*(Text(_narrow_barrier(row[i]) if i in narrow else row[i]) for i in visible))
    total = sum(widths) + layout.overhead(len(visible))
    Console(width=total if width is None else width, highlight=False, soft_wrap=False).print(table)
    if dropped:
        hidden = ", ".join(c.header for c in columns if c.header in dropped)
        for line in _fill(f"(hidden at {width} columns: {hidden}; widen the terminal or use --output json)", width):
            click.echo(line)


def _fill(text: str, width: int | None, indent: str = "") -> list[str]:
    """``text`` wrapped at spaces to ``width`` (never inside a word, so an id stays whole on one line)."""
    if width is None:
        return [text]
    return textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False) or [""]


def _vertical(title: str, columns: list[Col], cells: list[list[str]], width: int | None) -> None:
    """One ``key: value`` block per row: what a table too wide for the terminal becomes."""
    for line in _fill(f"{title} (one block per row: as a table it would not fit {width} columns)", width):
        click.echo(line)
    if not cells:
        click.echo("(none)")
    label = max(cell_len(c.header) for c in columns) + 1
    room = None if width is None else max(width - label - 1, 20)
    for row in cells:
        click.echo("")
        for column, value in zip(columns, row):
            lines = [part for line in value.splitlines() or [""] for part in _fill(line, room)]
            click.echo(f"{column.header + ':':<{label}} {lines[0]}")
            for line in lines[1:]:
                click.echo(f"{'':<{label}} {line}")
