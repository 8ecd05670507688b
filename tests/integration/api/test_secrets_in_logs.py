"""No log line, in either format, ever holds a secret (issue 26): requests aiohttp cannot
parse are answered with problem+json and a request id on an HTTP/1.1 status line and logged
by their kind only; tracebacks carry no local variables; whatever a library's exception
quotes - an API key, a bearer token, a DSN's password, an nkey seed - is redacted."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from typing import Literal

import orjson
import pytest

from streams.api.keys import create_api_key
from streams.api.server import run_api
from streams.config import ApiSettings, Settings
from tests.integration.json_logs import captured_logs

FORMATS: list[Literal["text", "json"]] = ["text", "json"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def _api(settings: Settings) -> AsyncIterator[int]:
    port = _free_port()
    serving = settings.model_copy(update={"api": ApiSettings(host="127.0.0.1", port=port)})
    stop = asyncio.Event()
    task = asyncio.create_task(run_api(serving, stop=stop))
    try:
        for _ in range(200):
            with contextlib.suppress(OSError):
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            await asyncio.sleep(0.05)
        yield port
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


async def _raw(port: int, request: bytes) -> tuple[str, dict[str, str], bytes]:
    """Send bytes, read the whole answer: its status line, headers and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body


def _pieces(secret: str, size: int = 8) -> set[str]:
    """Every run of ``size`` characters of a secret: none may appear in a log."""
    return {secret[i:i + size] for i in range(len(secret) - size + 1)}


@pytest.mark.parametrize("log_format", FORMATS)
async def test_unparseable_requests_are_answered_and_logged_without_their_bytes(
    settings: Settings, pg_pool: object, log_format: Literal["text", "json"]
) -> None:
    async with pg_pool.acquire() as conn:  # type: ignore[attr-defined]
        key = (await create_api_key(conn, tenant="acme", name="probe")).secret
    hostile = [
        # A header line over aiohttp's 8,190 bytes, holding the key.
        b"GET /v1/devices HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode()
        + b"X" * 9000 + b"\r\n\r\n",
        # A NUL in the header value.
        b"GET /v1/devices HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode()
        + b"\x00\r\n\r\n",
        # A request line too long, with the key in its query.
        b"GET /v1/devices?k=" + key.encode() + b"Y" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        # Not HTTP at all.
        b"\x16\x03\x01" + key.encode() + b"\r\n\r\n",
    ]
    with captured_logs(log_format) as logs:
        async with _api(settings) as port:
            for request in hostile:
                status, headers, body = await _raw(port, request)
                assert status.startswith("HTTP/1.1 400 "), status
                assert headers["content-type"].startswith("application/problem+json")
                assert headers["connection"] == "close"
                problem = orjson.loads(body)
                assert problem["code"] == "BAD_REQUEST"
                assert problem["request_id"] == headers["x-request-id"]
                assert key not in body.decode()
            # A well-formed request with the same key works (and is logged by its route).
            status, _, _ = await _raw(port, b"GET /v1/devices HTTP/1.1\r\nHost: x\r\n"
                                      b"Authorization: Bearer " + key.encode()
                                      + b"\r\nConnection: close\r\n\r\n")
            assert status.startswith("HTTP/1.1 200 ")
    text = logs.getvalue()
    assert sum("unparseable request" in line for line in text.splitlines()) == len(hostile)
    assert "Traceback" not in text
    leaked = [piece for piece in _pieces(key[3:]) if piece in text]
    assert not leaked, leaked[:3]


@pytest.mark.parametrize("log_format", FORMATS)
def test_a_logged_exception_shows_no_locals_and_no_secret(
    log_format: Literal["text", "json"]
) -> None:
    """What a Postgres outage wrote before: asyncpg's frames held the DSN and the password,
    the API's the caller's bearer token; an nkey seed or a device secret could sit anywhere."""
    password = "pw-3f9a7c1e5b"
    secrets = {
        "dsn": f"postgresql://tideway:{password}@db.internal:5432/tideway",
        "bearer": "Bearer tw_0a1b2c3d_" + "Q" * 43,
        "seed": "SUAMK2FG4MI6UE3ACF3FK3OIQBCEIEZV7NSWFFEW63UXMRLFM2XLAXK4GY",
        "device": "twd_abcdefghijklmnop_" + "Z" * 43,
        "libpq": f"host=db password={password} dbname=tideway",
    }

    def connect(dsn: str, bearer: str, seed: str) -> None:
        password_local = password  # a local named like the thing it holds
        raise ConnectionError(f"cannot connect to {dsn} ({secrets['libpq']}); "
                              f"{len(password_local)}")

    with captured_logs(log_format) as logs:
        log = logging.getLogger("streams.test")
        try:
            connect(secrets["dsn"], secrets["bearer"], secrets["seed"])
        except ConnectionError:
            log.exception("the database is down")
        log.warning("a device said %s with %s", secrets["device"], secrets["bearer"])
    text = logs.getvalue()
    assert "the database is down" in text and "Traceback" in text  # the traceback is there...
    assert "password_local" not in text  # ...without the frames' local variables
    assert password not in text
    for name, value in secrets.items():
        core = value.split("_", 1)[-1] if name in ("bearer", "device") else value
        assert core not in text, name
    assert "postgresql://tideway:***@db.internal" in text  # where it went, without the secret
