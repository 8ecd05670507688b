"""Layer rules the import contracts cannot see (docs/architecture.md): no SQL in the CLI, and no
circle between the console's ES modules."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.shared_data import REPO_ROOT

_SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|TRUNCATE)\s")
_IMPORT = re.compile(r"""^\s*import\s[^;]*?from\s+["']([^"']+)["']""", re.M)


def _sql_literals(path: Path) -> list[str]:
    """Where ``path`` spells a SQL statement in a string (plain or an f-string's text)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and _SQL.match(node.value)):
            found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    return found


def test_the_cli_spells_no_sql() -> None:
    """Commands call the read side (streams/views) and the domain packages; a query written
    in a command is one the API and the console cannot share."""
    offenders = [hit for path in sorted((REPO_ROOT / "streams" / "cli").glob("*.py"))
                 for hit in _sql_literals(path)]
    assert offenders == []


def test_the_check_finds_sql_where_there_is_some() -> None:
    sample = REPO_ROOT / "streams" / "jobs" / "sql.py"
    assert _sql_literals(sample), "the SQL check found nothing in the job engine's statements"


def _imports(path: Path) -> set[Path]:
    return {(path.parent / target).resolve() for target in _IMPORT.findall(path.read_text())}


def test_console_modules_import_no_module_that_imports_them() -> None:
    """The shell (app.js) imports the pages and the shared lib.js; pages import lib.js only;
    lib.js imports nothing of the console."""
    root = REPO_ROOT / "streams" / "api" / "console"
    app, lib = (root / "app.js").resolve(), (root / "lib.js").resolve()
    pages = sorted((root / "pages").glob("*.js"))
    assert pages and lib in _imports(app)
    assert {p.resolve() for p in pages} <= _imports(app)
    for page in pages:
        assert _imports(page) <= {lib}, page.name
    assert _imports(lib) == set()
