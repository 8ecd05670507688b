"""The NATS JWTs of the auth-callout exchange, signed and read with ``nkeys``.

nats-server sends an *authorization request* (a JWT its server key signed) on
``$SYS.REQ.USER.AUTH``; the auth service answers with an *authorization response* that carries a
*user* JWT — both signed by the callout's issuer account key. The format is the one of
nats-io/jwt v2: ``base64url(header).base64url(claims).base64url(ed25519 signature)`` with the
header ``{"typ":"JWT","alg":"ed25519-nkey"}`` and ``jti`` the base32 SHA-256 of the claims.

Written here on ``nkeys`` (the NATS maintainers' own key library) rather than taken from PyPI:
the one Python NATS JWT library (``nats-jwt`` 0.2.2, last released 2025-02) has no
authorization request/response claims, and brings four dependencies (pycryptodome, pytz,
dataclasses-json, dacite) for what is some 60 lines of encoding.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from dataclasses import dataclass
from typing import Any, Final

import nacl.exceptions
import nacl.signing
import nkeys
import orjson

__all__ = [
    "AuthorizationRequest", "TokenError", "authorization_response", "decode", "keypair",
    "new_seed", "public_key", "user_jwt",
]

_HEADER: Final = base64.urlsafe_b64encode(
    orjson.dumps({"typ": "JWT", "alg": "ed25519-nkey"})).rstrip(b"=")


class TokenError(ValueError):
    """A JWT that is malformed, badly signed, or not the kind expected."""


def _b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def _unb64(text: bytes) -> bytes:
    return base64.urlsafe_b64decode(text + b"=" * (-len(text) % 4))


def new_seed(prefix: int = nkeys.PREFIX_BYTE_ACCOUNT) -> bytes:
    """A new nkey seed (``SA...`` for an account, ``SU...`` for a user)."""
    import os

    return bytes(nkeys.encode_seed(os.urandom(32), prefix))


def keypair(seed: bytes | str) -> nkeys.KeyPair:
    raw = seed.encode() if isinstance(seed, str) else seed
    return nkeys.from_seed(bytearray(raw.strip()))


def public_key(seed: bytes | str) -> str:
    return str(keypair(seed).public_key.decode())


def _verify_key(public: str) -> nacl.signing.VerifyKey:
    """The Ed25519 key behind an nkey public key (``N...``, ``A...``, ``U...``)."""
    try:
        raw = base64.b32decode(public.encode() + b"=" * (-len(public) % 8))
    except binascii.Error as exc:
        raise TokenError("issuer is not an nkey") from exc
    if len(raw) != 35 or nkeys.crc16_checksum(bytearray(raw[:-2])) != raw[-2:]:
        raise TokenError("issuer is not an nkey")
    return nacl.signing.VerifyKey(raw[1:-2])


def _encode(claims: dict[str, Any], signer: nkeys.KeyPair) -> str:
    claims = {**claims, "jti": "", "iss": signer.public_key.decode()}
    claims.setdefault("iat", int(time.time()))
    claims["jti"] = base64.b32encode(hashlib.sha256(orjson.dumps(claims)).digest()).decode()
    claims["jti"] = claims["jti"].rstrip("=")
    body = _HEADER + b"." + _b64(orjson.dumps(claims))
    return (body + b"." + _b64(signer.sign(body))).decode()


def decode(token: str | bytes, *, kind: str) -> dict[str, Any]:
    """The claims of ``token`` after checking its signature against its own issuer and that
    it is a ``kind`` claim (``authorization_request``, ``user``...)."""
    raw = token.encode() if isinstance(token, str) else token
    parts = raw.strip().split(b".")
    if len(parts) != 3:
        raise TokenError("not a JWT")
    try:
        header = orjson.loads(_unb64(parts[0]))
        claims = orjson.loads(_unb64(parts[1]))
        signature = _unb64(parts[2])
    except (ValueError, binascii.Error) as exc:
        raise TokenError("not a JWT") from exc
    if not isinstance(header, dict) or header.get("alg") not in ("ed25519-nkey", "ed25519"):
        raise TokenError("not an nkey-signed JWT")
    if not isinstance(claims, dict) or not isinstance(claims.get("iss"), str):
        raise TokenError("JWT without an issuer")
    try:
        _verify_key(claims["iss"]).verify(parts[0] + b"." + parts[1], signature)
    except nacl.exceptions.BadSignatureError as exc:
        raise TokenError("bad JWT signature") from exc
    nats = claims.get("nats")
    if not isinstance(nats, dict) or nats.get("type") != kind:
        raise TokenError(f"not a {kind} JWT")
    return claims


@dataclass(frozen=True)
class AuthorizationRequest:
    """What nats-server asks about one connection (the fields Tideway reads)."""

    server_id: str
    server_name: str
    user_nkey: str
    """The per-connection key nats-server made up; the user JWT's subject must be it."""
    username: str
    password: str
    client_id: int
    client_host: str
    client_kind: str
    """``Client`` for a NATS client; MQTT connections arrive with ``client_type`` ``mqtt``."""
    client_type: str
    client_name: str

    @classmethod
    def parse(cls, token: bytes) -> AuthorizationRequest:
        claims = decode(token, kind="authorization_request")
        nats = claims["nats"]
        server = nats.get("server_id") or {}
        client = nats.get("client_info") or {}
        opts = nats.get("connect_opts") or {}
        return cls(
            server_id=str(server.get("id", "")), server_name=str(server.get("name", "")),
            user_nkey=str(nats.get("user_nkey", "")),
            username=str(opts.get("user") or ""), password=str(opts.get("pass") or ""),
            client_id=int(client.get("id") or 0), client_host=str(client.get("host") or ""),
            client_kind=str(client.get("kind") or ""), client_type=str(client.get("type") or ""),
            client_name=str(opts.get("name") or client.get("name") or ""),
        )


def user_jwt(signer: nkeys.KeyPair, *, user_nkey: str, name: str, account: str,
             permissions: dict[str, Any], tags: list[str], expires_s: int | None = None) -> str:
    """A user JWT placing the connection of ``user_nkey`` into ``account`` (by name: the
    server's configuration mode) with ``permissions`` (``{"pub": {"allow": [...]}, ...}``)."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "iat": now, "sub": user_nkey, "name": name, "aud": account,
        "nats": {**permissions, "tags": tags, "subs": -1, "data": -1, "payload": -1,
                 "type": "user", "version": 2},
    }
    if expires_s is not None:
        claims["exp"] = now + expires_s
    return _encode(claims, signer)


def authorization_response(signer: nkeys.KeyPair, *, user_nkey: str, server_id: str,
                           jwt: str = "", error: str = "") -> bytes:
    """The answer to one authorization request: the user JWT, or an error (refused)."""
    nats: dict[str, Any] = {"type": "authorization_response", "version": 2}
    if jwt:
        nats["jwt"] = jwt
    if error:
        nats["error"] = error
    return _encode({"sub": user_nkey, "aud": server_id, "nats": nats}, signer).encode()
