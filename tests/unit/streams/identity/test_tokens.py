"""The NATS JWTs of the auth-callout exchange: what Tideway signs reads back, carries what
nats-server needs, and anything altered, unsigned or of another kind is refused. (That
nats-server itself accepts them is tests/integration/device_identity.)"""

from __future__ import annotations

import base64

import nkeys
import orjson
import pytest

from streams.identity import tokens


def _claims(token: str) -> dict[str, object]:
    body = token.split(".")[1]
    padded = body + "=" * (-len(body) % 4)
    decoded: dict[str, object] = orjson.loads(base64.urlsafe_b64decode(padded))
    return decoded


def test_a_user_jwt_reads_back_with_its_issuer_subject_account_and_permissions() -> None:
    issuer = tokens.keypair(tokens.new_seed())
    user = tokens.public_key(tokens.new_seed(nkeys.PREFIX_BYTE_USER))
    permissions = {"pub": {"allow": ["telemetry.acme.d1.>"]}, "sub": {"allow": ["_X.>"]}}
    token = tokens.user_jwt(issuer, user_nkey=user, name="acme.d1", account="TIDEWAY",
                            permissions=permissions, tags=[])
    claims = tokens.decode(token, kind="user")
    assert claims["iss"] == issuer.public_key.decode()
    assert claims["sub"] == user and claims["aud"] == "TIDEWAY" and claims["name"] == "acme.d1"
    assert claims["nats"]["pub"] == permissions["pub"]  # type: ignore[index]
    assert claims["nats"]["version"] == 2  # type: ignore[index]
    assert len(str(claims["jti"])) == 52  # base32 SHA-256, unpadded


def test_an_answer_names_the_connection_and_the_server() -> None:
    issuer = tokens.keypair(tokens.new_seed())
    answer = tokens.authorization_response(issuer, user_nkey="UABC", server_id="NXYZ",
                                           error="not authorized")
    claims = tokens.decode(answer, kind="authorization_response")
    assert (claims["sub"], claims["aud"]) == ("UABC", "NXYZ")
    assert claims["nats"] == {"type": "authorization_response", "version": 2,  # type: ignore[comparison-overlap]
                              "error": "not authorized"}


def test_an_altered_token_is_refused() -> None:
    issuer = tokens.keypair(tokens.new_seed())
    token = tokens.user_jwt(issuer, user_nkey="UA", name="acme.d1", account="TIDEWAY",
                            permissions={"pub": {"allow": ["telemetry.acme.d1.>"]}}, tags=[])
    header, _, signature = token.split(".")
    widened = _claims(token)
    widened["nats"]["pub"] = {"allow": [">"]}  # type: ignore[index]
    forged = ".".join([header, base64.urlsafe_b64encode(orjson.dumps(widened)).decode()
                       .rstrip("="), signature])
    with pytest.raises(tokens.TokenError, match="signature"):
        tokens.decode(forged, kind="user")
    # Re-signed by someone else's key, claiming the issuer's name: still refused.
    other = tokens.keypair(tokens.new_seed())
    body_bytes = f"{header}.{forged.split('.')[1]}".encode()
    resigned = body_bytes.decode() + "." + base64.urlsafe_b64encode(
        other.sign(body_bytes)).decode().rstrip("=")
    with pytest.raises(tokens.TokenError):
        tokens.decode(resigned, kind="user")


@pytest.mark.parametrize("bad", [b"", b"a.b", b"not.a.jwt", b"x.y.z.w"])
def test_garbage_is_refused(bad: bytes) -> None:
    with pytest.raises(tokens.TokenError):
        tokens.decode(bad, kind="authorization_request")


def test_a_token_of_another_kind_is_refused() -> None:
    issuer = tokens.keypair(tokens.new_seed())
    answer = tokens.authorization_response(issuer, user_nkey="UA", server_id="N")
    with pytest.raises(tokens.TokenError, match="authorization_request"):
        tokens.AuthorizationRequest.parse(answer)
