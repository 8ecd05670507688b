"""``tideway config show`` and ``tideway migrate``."""

from __future__ import annotations

import typer

from streams import migrate as migrations
from streams.cli.options import JSON_OPTION
from streams.cli.output import console, print_json, print_record
from streams.config import load_settings

config_app = typer.Typer(help="Inspect the effective settings.", no_args_is_help=True)


@config_app.command("show")
def show(as_json: bool = JSON_OPTION) -> None:
    """Print the effective settings (environment + tideway.toml + defaults), secrets masked."""
    data = load_settings().masked()
    if as_json:
        print_json(data)
        return
    flat: dict[str, object] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            for sub, subvalue in value.items():
                flat[f"{key}.{sub}"] = subvalue
        else:
            flat[key] = (
                "(embedded)" if value is None and key.endswith(("_url", "_dsn")) else value
            )
    print_record(flat, title="Tideway settings")


def migrate(
    to: str = typer.Option("head", "--to", help="Target revision (head, base, or an id)."),
) -> None:
    """Migrate the configured Postgres database (TIDEWAY_POSTGRES_DSN) up or down."""
    dsn = load_settings().postgres()
    before = migrations.current(dsn)
    target_is_older = to == "base" or (before is not None and _is_ancestor(to, before))
    if target_is_older:
        migrations.downgrade(dsn, to)
    else:
        migrations.upgrade(dsn, to)
    console.print(f"migrated {before or 'base'} → {migrations.current(dsn) or 'base'}")


def _is_ancestor(candidate: str, revision: str) -> bool:
    """True when ``candidate`` is strictly below ``revision`` in the migration history."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrations.alembic_config("postgresql://"))
    below = {r.revision for r in script.iterate_revisions(revision, "base")} - {revision}
    return candidate in below
