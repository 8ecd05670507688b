"""The HTTP API at its edge: bad input is a 400/401 with the JSON error body, never a 500 or
plain text, and a refused upload leaves nothing in the object store.

Most requests go over a raw socket to ``run_api`` (the real server on a local port): HTTP
client libraries refuse to send non-UTF-8 header bytes, NUL in a file name or an oversized
header, and only the real runner answers aiohttp's own parse errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from streams.api.context import ApiContext
from streams.api.keys import create_api_key
from streams.api.server import build_app, run_api
from streams.config import Settings
from streams.names import Names
from streams.objects import ObjectStore, artifact_key
from tests.integration.sessions.conftest import running_intake

BOUNDARY = b"tideway-test-boundary"


@contextlib.asynccontextmanager
async def served(settings: Settings) -> AsyncIterator[int]:
    """``run_api`` on a free local port, until the block ends; yields the port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    api = settings.api.model_copy(update={"host": "127.0.0.1", "port": port})
    stop = asyncio.Event()
    task = asyncio.create_task(run_api(settings.model_copy(update={"api": api}), stop=stop))
    try:
        for _ in range(200):
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                await writer.wait_closed()
                break
            if task.done():
                task.result()
            await asyncio.sleep(0.05)
        yield port
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def raw(port: int, head: bytes, body: bytes = b"") -> tuple[int, dict[str, str], Any]:
    """Send one request as bytes; return status, headers and the decoded JSON body.

    ``head`` is the request line and headers, each ending with CRLF; ``Host``,
    ``Content-Length`` and ``Connection: close`` are added here.
    """
    assert head.endswith(b"\r\n")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    extra = b"Host: test\r\nConnection: close\r\n"
    if body:
        extra += b"Content-Length: %d\r\n" % len(body)
    writer.write(head + extra + b"\r\n" + body)
    await writer.drain()
    data = await reader.read()
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    top, _, payload = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    status = int(lines[0].split()[1])
    wanted = "application/problem+json" if status >= 400 else "application/json"
    assert headers["content-type"].startswith(wanted), (lines[0], payload)
    return status, headers, orjson.loads(payload)


def multipart(*parts: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    """A multipart/form-data body from ``(Content-Disposition params, content)`` pairs."""
    body = b"".join(
        b"--" + BOUNDARY + b"\r\nContent-Disposition: form-data; " + disp + b"\r\n\r\n"
        b"" + content + b"\r\n"
        for disp, content in parts
    )
    content_type = b"Content-Type: multipart/form-data; boundary=" + BOUNDARY + b"\r\n"
    return content_type, body + b"--" + BOUNDARY + b"--\r\n"


def file_part(filename: bytes, content: bytes) -> tuple[bytes, bytes]:
    return b'name="file"; filename="' + filename + b'"', content


def field(name: bytes, value: bytes) -> tuple[bytes, bytes]:
    return b'name="' + name + b'"', value


async def upload(
    port: int, key: bytes, *parts: tuple[bytes, bytes], query: bytes = b""
) -> tuple[int, Any]:
    content_type, body = multipart(*parts)
    head = b"POST /v1/sessions" + query + b" HTTP/1.1\r\nX-API-Key: " + key + b"\r\n"
    status, _, answer = await raw(port, head + content_type, body)
    return status, answer


async def api_key(settings: Settings, tenant: str = "acme") -> bytes:
    import asyncpg

    conn = await asyncpg.connect(settings.postgres())
    try:
        return (await create_api_key(conn, tenant=tenant, name="test")).secret.encode()
    finally:
        await conn.close()


def stored_files(settings: Settings) -> list[str]:
    """Every file under the object store's root (artifacts, tmp/, anything)."""
    root = Path(settings.objects())
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def key_of(content: bytes, tenant: str = "acme") -> str:
    return artifact_key(tenant, hashlib.sha256(content).hexdigest())


async def recorded_keys(settings: Settings) -> list[str]:
    """The object keys the accepted sessions' artifact rows point at."""
    import asyncpg

    store = ObjectStore(settings.objects())
    conn = await asyncpg.connect(settings.postgres())
    try:
        rows = await conn.fetch("SELECT storage_url FROM artifacts")
    finally:
        await conn.close()
    return sorted(store.key(r["storage_url"]) for r in rows)


def assert_error(answer: Any, code: str) -> None:
    """An RFC 9457 problem with the stable ``code`` (``raw`` checked its content type)."""
    assert answer["code"] == code, answer
    assert answer["type"] == f"urn:tideway:error:{code}", answer
    assert isinstance(answer["status"], int) and isinstance(answer["title"], str), answer
    assert isinstance(answer["detail"], str) and answer["detail"], answer


async def test_api_key_that_is_not_utf8_is_401_json(settings: Settings) -> None:
    await api_key(settings)  # a tenant with a real key exists; these are not it
    async with served(settings) as port:
        for header in (b"X-API-Key: tw_\xff\xfe_secret", b"Authorization: Bearer tw_\xc3\x28"):
            for line in (b"GET /v1/sessions", b"POST /v1/sessions", b"GET /v1/runs/x"):
                status, _, answer = await raw(port, line + b" HTTP/1.1\r\n" + header + b"\r\n")
                assert status == 401, (line, header)
                assert_error(answer, "UNAUTHENTICATED")
    assert stored_files(settings) == []


async def test_query_with_nul_or_invalid_utf8_is_400_json(settings: Settings) -> None:
    key = await api_key(settings)
    async with served(settings) as port:
        for query in (b"?device=%00", b"?device=%FF", b"?device=%C3", b"?limit=5&x%00=1"):
            head = b"GET /v1/sessions" + query + b" HTTP/1.1\r\nX-API-Key: " + key + b"\r\n"
            status, _, answer = await raw(port, head)
            assert status == 400, query
            assert_error(answer, "USAGE_ERROR")
        # The same checks guard an upload's query fields, and a multipart form field.
        head = b"POST /v1/sessions?device=d&title=a%00b HTTP/1.1\r\nX-API-Key: " + key + b"\r\n"
        status, _, answer = await raw(port, head, b"some bytes")
        assert status == 400
        assert_error(answer, "USAGE_ERROR")
        for title in (b"a\x00b", b"\xff\xfe"):
            status, answer = await upload(
                port, key, field(b"device", b"d"), field(b"title", title), file_part(b"f", b"x")
            )
            assert status == 400, title
            assert_error(answer, "USAGE_ERROR")
        status, answer = await upload(
            port, key, field(b"config", b'{"a": "\\u0000"}'), file_part(b"f", b"x"),
            query=b"?device=d",
        )  # fmt: skip
        assert status == 400
        assert_error(answer, "INVALID_CONFIG")  # the one run-config check, as reprocess's
        # Sanity: a clean query still works.
        head = b"GET /v1/sessions?device=kart-1 HTTP/1.1\r\nX-API-Key: " + key + b"\r\n"
        status, _, answer = await raw(port, head)
        assert status == 200 and answer == {"items": [], "next": None}
    assert stored_files(settings) == []


async def test_bad_file_names_are_400_and_store_nothing(settings: Settings) -> None:
    key = await api_key(settings)
    bad_names = [
        b"../etc/passwd",
        b"a/b.nmea",
        b"a\x00b.nmea",
        b"x" * 256,
        "é".encode() * 128,  # 128 characters, 256 bytes
        b".",
        b"..",
        b"",
        b"tab\there.nmea",
        b"\xff\xfe.nmea",  # not UTF-8
    ]
    async with served(settings) as port:
        for name in bad_names:
            status, answer = await upload(
                port, key, field(b"device", b"d"), file_part(name, b"session data " + name)
            )
            assert status == 400, name
            assert_error(answer, "USAGE_ERROR")
        # RFC 5987 spelling, which aiohttp decodes: a backslash and a slash.
        for encoded in (b"utf-8''a%5Cb.nmea", b"utf-8''%2Fetc%2Fx"):
            status, answer = await upload(
                port, key, field(b"device", b"d"), (b'name="file"; filename*=' + encoded, b"x")
            )
            assert status == 400, encoded
            assert_error(answer, "USAGE_ERROR")
        # A raw-body upload names its file in the query string.
        for query in (b"a%2Fb", b"a%00b", b"x" * 256, b".."):
            head = b"POST /v1/sessions?device=d&filename=" + query + b" HTTP/1.1\r\n"
            status, _, answer = await raw(port, head + b"X-API-Key: " + key + b"\r\n", b"data")
            assert status == 400, query
            assert_error(answer, "USAGE_ERROR")
    assert stored_files(settings) == []  # not even under tmp/


async def test_store_holds_exactly_the_files_of_accepted_sessions(settings: Settings) -> None:
    key = await api_key(settings)
    shared, first_only, second_only = b"shared lap\n", b"first lap\n", b"second lap\n"
    refused = [
        # Each refusal is detected only after a file part was read: the device, priority or
        # config field comes after it, or a later part has a bad name, or a file is empty.
        (file_part(b"a.nmea", b"refused 1"), field(b"device", b"bad id")),
        (file_part(b"a.nmea", b"refused 2"), field(b"device", b"d"), field(b"priority", b"x")),
        (file_part(b"a.nmea", b"refused 3"), field(b"device", b"d"), field(b"config", b"[1]")),
        (file_part(b"a.nmea", b"refused 4"), file_part(b"b/c", b"refused 5")),
        (file_part(b"a.nmea", b"refused 6"), file_part(b"e.nmea", b""), field(b"device", b"d")),
        (file_part(b"a.nmea", shared), field(b"device", b"d"), field(b"priority", b"5000")),
    ]
    async with running_intake(settings), served(settings) as port:
        status, first = await upload(
            port,
            key,
            field(b"device", b"kart-1"),
            file_part(b"shared.nmea", shared),
            file_part(b"first.nmea", first_only),
        )
        assert status == 202, first
        for parts in refused:
            status, answer = await upload(port, key, *parts)
            assert status == 400, parts
            assert_error(answer, "USAGE_ERROR")
        status, second = await upload(
            port,
            key,
            file_part(b"shared.nmea", shared),  # the same content as an accepted session's
            file_part(b"second.nmea", second_only),
            field(b"device", b"kart-1"),
        )
        assert status == 202, second
        assert first["run_id"] and second["run_id"]
    expected = sorted(key_of(c) for c in (shared, first_only, second_only))
    assert await recorded_keys(settings) == expected
    assert stored_files(settings) == expected


async def test_failed_publish_removes_only_the_files_nobody_else_has(settings: Settings) -> None:
    key = await api_key(settings)
    accepted, fresh = b"accepted lap\n", b"never published\n"
    async with running_intake(settings), served(settings) as port:
        status, answer = await upload(port, key, field(b"device", b"d"), file_part(b"a", accepted))
        assert status == 202 and answer["run_id"], answer
    # With the SESSIONS stream gone, every publish fails after the files were stored.
    nc = await nats.connect(settings.nats())
    try:
        await nc.jetstream().delete_stream(Names(namespace=settings.namespace).sessions_stream)
    finally:
        await nc.close()
    store_root = Path(settings.objects())
    # Stored by someone else (another process's upload, not yet recorded by intake).
    elsewhere = b"stored by another uploader\n"
    ObjectStore(settings.objects()).put_artifact("acme", [elsewhere])
    kept = sorted([key_of(accepted), key_of(elsewhere)])
    async with served(settings) as port:
        status, answer = await upload(
            port,
            key,
            field(b"device", b"d"),
            file_part(b"a", accepted),
            file_part(b"b", fresh),
            file_part(b"c", elsewhere),
        )
        assert status == 503
        assert_error(answer, "NATS_PUBLISH")
        assert stored_files(settings) == kept  # only the file this upload created is removed
        # Even a file this very upload put back is kept when an accepted session refers to it.
        (store_root / key_of(accepted)).unlink()
        status, answer = await upload(port, key, field(b"device", b"d"), file_part(b"a", accepted))
        assert status == 503
    assert stored_files(settings) == kept
    assert await recorded_keys(settings) == [key_of(accepted)]


async def test_http_level_errors_are_json(settings: Settings) -> None:
    key = await api_key(settings)
    small = settings.model_copy(
        update={"worker": settings.worker.model_copy(update={"max_artifact_bytes": 16})}
    )
    async with served(small) as port:
        for auth in (b"", b"X-API-Key: " + key + b"\r\n"):
            status, _, answer = await raw(port, b"GET /v2/nothing HTTP/1.1\r\n" + auth)
            assert status == 404
            assert_error(answer, "NOT_FOUND")
        status, headers, answer = await raw(
            port, b"DELETE /v1/sessions HTTP/1.1\r\nX-API-Key: " + key + b"\r\n"
        )
        assert status == 405 and "GET" in headers["allow"]
        assert_error(answer, "METHOD_NOT_ALLOWED")
        # aiohttp refuses these while parsing, before the application sees a request.
        for head in (
            b"GET /v1/sessions HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n",
            b"GET /v1/sessions?" + b"a" * 9000 + b" HTTP/1.1\r\n",
            b"GET /v1/sessions HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(200)),
        ):
            status, _, answer = await raw(port, head)
            assert status == 400
            assert_error(answer, "BAD_REQUEST")
        # Too large: a file over max_artifact_bytes, and a form field over client_max_size.
        head = b"POST /v1/sessions?device=d HTTP/1.1\r\nX-API-Key: " + key + b"\r\n"
        status, _, answer = await raw(port, head, b"x" * 100)
        assert status == 413
        assert_error(answer, "TOO_LARGE")
        status, answer = await upload(
            port, key, field(b"title", b"t" * (2 << 20)), file_part(b"a", b"x")
        )
        assert status == 413
        assert_error(answer, "TOO_LARGE")
    assert stored_files(small) == []


async def test_unexpected_exception_is_500_json(settings: Settings, pool: Any) -> None:
    nc = await nats.connect(settings.nats())
    ctx = ApiContext(settings=settings, pool=pool, store=ObjectStore(settings.objects()), nats=nc)
    app = build_app(ctx)

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("a bug")

    app.router.add_get("/v1/healthz/broken", broken)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        key = (await api_key(settings)).decode()
        resp = await client.get("/v1/healthz/broken", headers={"X-API-Key": key})
        assert resp.status == 500
        assert_error(await resp.json(), "INTERNAL_ERROR")
        assert "a bug" not in await resp.text()
    finally:
        await client.close()
        await nc.close()
