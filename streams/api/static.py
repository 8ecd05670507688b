"""The console's files: ``/`` is its page, ``/console/...`` its scripts and styles.

The console (``streams/api/console/``) is plain ES modules, SVG and CSS shipped as package data
in the wheel, so it works offline: no build step, no CDN, no map tiles. The files need no key
(they hold no data); the page signs in with an API key and calls the documented ``/v1`` routes
with it. The Content-Security-Policy keeps it that way: the page may load and call only this
origin.
"""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path

from aiohttp import web

__all__ = ["CONSOLE_PREFIX", "add_console", "is_console_path"]

CONSOLE_PREFIX = "/console/"
_CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
_HEADERS = {"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff"}


def console_dir() -> Path:
    """The folder of the console's files (inside the installed package)."""
    with as_file(files("streams.api") / "console") as path:  # a real folder: not zipped
        return Path(path)


def is_console_path(path: str) -> bool:
    """Whether ``path`` is one of the console's files (served without a key)."""
    return path == "/" or path.startswith(CONSOLE_PREFIX)


def add_console(app: web.Application) -> None:
    """Serve the console on ``app``: its page at ``/``, its files under ``/console/``."""
    root = console_dir()
    index = (root / "index.html").read_bytes()

    async def page(request: web.Request) -> web.Response:
        return web.Response(
            body=index, content_type="text/html", charset="utf-8",
            headers={**_HEADERS, "Cache-Control": "no-cache"},
        )  # fmt: skip

    # The files are fixed when the process starts: a lookup in this table, not a path joined
    # from the request, so nothing outside the folder can be named (no traversal to guard).
    shipped = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}

    async def asset(request: web.Request) -> web.StreamResponse:
        path = shipped.get(request.match_info["path"])
        if path is None:
            raise web.HTTPNotFound()  # answered as a problem, like every other error
        return web.FileResponse(path, headers={**_HEADERS, "Cache-Control": "no-cache"})

    app.router.add_get("/", page, name="console")
    app.router.add_get(CONSOLE_PREFIX + "{path:.+}", asset, name="console_files")
