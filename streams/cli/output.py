"""How every CLI command prints: rich tables for people, ``--json`` for scripts.

One home for the rule "list/show commands take --json", so commands only build data.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from streams.cli.exit_codes import ExitCode

console = Console()
err_console = Console(stderr=True)
# Piped or redirected, stderr is read by scripts and log collectors: one message, one line
# (rich would otherwise wrap it at 80 columns, its width when there is no terminal).
err_console.soft_wrap = not err_console.is_terminal


def print_json(data: Any) -> None:
    """Write ``data`` as indented JSON on stdout (datetimes, UUIDs and Decimals included)."""
    sys.stdout.write(
        orjson.dumps(
            data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str
        ).decode()
        + "\n"
    )


def print_rows(
    rows: Sequence[Mapping[str, Any]],
    *,
    columns: Iterable[str],
    title: str | None = None,
    as_json: bool = False,
) -> None:
    """Print ``rows`` as a table (or a JSON list when ``as_json``)."""
    if as_json:
        print_json(list(rows))
        return
    cols = list(columns)
    table = Table(title=title)
    for col in cols:
        table.add_column(col)
    for row in rows:
        table.add_row(*("" if row.get(c) is None else str(row.get(c)) for c in cols))
    console.print(table)


def print_record(
    record: Mapping[str, Any], *, title: str | None = None, as_json: bool = False
) -> None:
    """Print one record as a two-column key/value table (or a JSON object)."""
    if as_json:
        print_json(dict(record))
        return
    table = Table(title=title, show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in record.items():
        table.add_row(str(key), "" if value is None else str(value))
    console.print(table)


def fail(message: str, *, code: int = ExitCode.ERROR) -> None:
    """Print an error for a person and exit with ``code`` (no traceback)."""
    # The message is text, not markup: rich would eat "[embedded]" in "tideway[embedded]".
    err_console.print(f"[bold red]error:[/] {escape(message)}")
    raise SystemExit(code)
