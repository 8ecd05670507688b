"""Connection-level failures answered with the API's JSON error body instead of plain text.

aiohttp answers a request it cannot parse - a header or request line over ``max_field_size`` /
``max_line_size``, too many headers, a malformed request line - from its connection handler,
before the application and its middlewares ever see the request, with a plain-text body
(aio-libs/aiohttp#3287 asks for a hook; there is none). The same handler writes the answer when
an exception escapes the middlewares. So :class:`ApiRunner` swaps in a connection handler whose
``handle_error`` writes the API's problem+json body with a request id (header and body), on an
HTTP/1.1 status line, and logs an unparseable request by its kind only: aiohttp's exception
quotes the raw request bytes, an API key among them.

This is a risky choice, named here: it relies on aiohttp internals - ``AppRunner._make_server``,
``Server.__call__`` building a ``RequestHandler`` from ``Server._loop`` / ``Server._kwargs``, and
``RequestHandler.handle_error``, and ``StreamResponse._write_headers`` (the status line). The
API tests send such requests over a raw socket, so an
aiohttp upgrade that moves any of these fails a test rather than the API's error contract.
"""

from __future__ import annotations

import logging
import uuid

from aiohttp import HttpVersion11, web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from streams.api.context import error_response, http_code
from streams.api.request_id import HEADER
from streams.observability.logs import log_context

log = logging.getLogger("streams.api.access")

__all__ = ["ApiRunner"]

_MESSAGES = {
    400: "the request could not be parsed (malformed, or a request line or header too large)",
    500: "an unexpected error occurred",
}


class _Http11Response(web.Response):
    """A response whose status line says HTTP/1.1 even when the request could not be parsed
    (aiohttp then answers with its placeholder request's HTTP/1.0)."""

    async def _write_headers(self) -> None:
        request = self._req
        if request is not None and request.version < HttpVersion11:
            writer = self._payload_writer
            assert writer is not None
            await writer.write_headers(f"HTTP/1.1 {self.status} {self.reason}", self._headers)
            writer.send_headers()
            return
        await super()._write_headers()


class _JsonErrorHandler(RequestHandler):
    __slots__ = ()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        request_id = uuid.uuid4().hex
        if status == 400:
            # A request aiohttp could not parse. Its exception quotes the raw bytes - an API
            # key in an oversized or malformed Authorization header - so it is logged by its
            # kind only, once, without a traceback (and the base class is not called: it logs
            # the whole exception at ERROR).
            log.warning("unparseable request from %s: %s", request.remote,
                        type(exc).__name__ if exc is not None else "bad request",
                        extra={"request_id": request_id})
            if request.writer.output_size > 0:
                raise ConnectionError("a response has begun; no error answer can follow")
        else:
            # The base class logs the failure (its traceback has no local variables and goes
            # through the log's redaction) and refuses (ConnectionError) when a response has
            # already begun; its plain-text body is what we replace.
            with log_context(request_id=request_id):
                super().handle_error(request, status, exc, message)
        text = _MESSAGES.get(status, "the request failed")
        plain = error_response(status, http_code(status), text, request_id=request_id)
        resp = _Http11Response(body=plain.body, status=status,
                               headers={**plain.headers, HEADER: request_id,
                                        "Connection": "close"})
        resp.force_close()  # as aiohttp does: the connection's state is unknown after this
        return resp


class _JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class ApiRunner(web.AppRunner):
    """An :class:`aiohttp.web.AppRunner` whose connection-level errors are JSON too."""

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()
        return _JsonErrorServer(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            **plain._kwargs,
        )
