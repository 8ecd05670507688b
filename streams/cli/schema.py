"""CLI commands for this area (registered on the main ``tideway`` app)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to ``app``."""
