"""The ``nats`` settings group: read from TIDEWAY_NATS__*, a cluster's server list, secrets
masked, and turned into nats-py's connect options (the live refusals are in
tests/integration/nats_security)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from streams.adapters.nats import security_options
from streams.config import NatsSettings, Settings
from streams.errors import ConfigError


def test_the_group_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TIDEWAY_CONFIG", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("TIDEWAY_NATS_URL", "nats://a:4222, nats://b:4222,nats://c:4222")
    monkeypatch.setenv("TIDEWAY_NATS__USER", "tideway")
    monkeypatch.setenv("TIDEWAY_NATS__PASSWORD", "s3cret")
    monkeypatch.setenv("TIDEWAY_NATS__CREDS_FILE", "/run/secrets/nats.creds")
    s = Settings()
    assert s.nats() == "nats://a:4222, nats://b:4222,nats://c:4222"
    assert s.nats.servers() == ["nats://a:4222", "nats://b:4222", "nats://c:4222"]
    assert s.nats.creds_file == Path("/run/secrets/nats.creds")
    shown = s.masked()
    assert shown["nats"]["password"] != "s3cret" and "s3cret" not in repr(s)


def test_with_services_rebinds_the_url_and_leaves_the_original_alone() -> None:
    s = Settings(nats_url=None)
    moved = s.with_services(nats_url="nats://u:pw@a:1,nats://u:pw@b:2")
    assert moved.nats.servers() == ["nats://u:pw@a:1", "nats://u:pw@b:2"]
    assert moved.masked()["nats_url"] == "nats://u:***@a:1,nats://u:***@b:2"
    with pytest.raises(ConfigError, match="nats_url is not set"):
        s.nats()


def test_no_options_means_a_plain_anonymous_connection() -> None:
    assert security_options(NatsSettings()) == {}


def test_user_password_and_tls_become_nats_py_options(tmp_path: Path) -> None:
    options = security_options(NatsSettings(user="u", password="p", tls_ca=None,
                                            nkey_seed_file=None))
    assert options == {"user": "u", "password": "p"}
    with pytest.raises(ConfigError, match=r"tls_cert and nats\.tls_key"):
        security_options(NatsSettings(tls_cert=tmp_path / "c.pem"))
    with pytest.raises(ConfigError) as raised:
        security_options(NatsSettings(tls_ca=tmp_path / "missing.pem"))
    assert raised.value.code == "NATS_TLS_CONFIG"
    with pytest.raises(ConfigError) as raised:
        security_options(NatsSettings(creds_file=tmp_path / "missing.creds"))
    assert raised.value.code == "NATS_AUTH_CONFIG"


def test_a_ca_alone_gives_a_verifying_tls_context(tmp_path: Path) -> None:
    from tests.integration.nats_security.servers import make_pki

    pki = make_pki(tmp_path)
    context = security_options(NatsSettings(tls_ca=pki.ca))["tls"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
