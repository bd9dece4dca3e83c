"""A company network on loopback: a private certificate authority, a TLS server whose
certificate it signed, and a CONNECT proxy, all on 127.0.0.1 and each stopping by itself.

Every socket has a timeout, every loop a bound (count or deadline); nothing listens or connects
anywhere but 127.0.0.1.
"""

from __future__ import annotations

import json
import selectors
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK = "127.0.0.1"
SOCKET_TIMEOUT = 5.0  # seconds any socket here waits for a peer
TUNNEL_SECONDS = 10.0  # the longest a proxy tunnel stays open
MAX_HEAD = 64 * 1024  # bytes of a proxy request head


@dataclass(frozen=True)
class Authority:
    """A certificate authority made for one test, and a server certificate it signed."""

    ca_file: Path  # the CA certificate, PEM: what SSL_CERT_FILE points at
    cert_file: Path  # the server's certificate (127.0.0.1, localhost), PEM
    key_file: Path  # the server's private key, PEM


def make_authority(directory: Path) -> Authority:
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mergegate test CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.IPAddress(IPv4Address(LOOPBACK)), x509.DNSName("localhost")]
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, LOOPBACK)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    authority = Authority(
        directory / "ca.pem", directory / "server.pem", directory / "server-key.pem"
    )
    authority.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    authority.cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    authority.key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return authority


def server_context(authority: Authority) -> ssl.SSLContext:
    """A TLS server context presenting the certificate the authority signed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(authority.cert_file, authority.key_file)
    return context


def hashed_directory(authority: Authority, directory: Path) -> Path:
    """A directory in OpenSSL's hashed layout holding the CA: what SSL_CERT_DIR points at."""
    directory.mkdir(parents=True, exist_ok=True)
    argv = ["openssl", "x509", "-hash", "-noout", "-in", str(authority.ca_file)]
    digest = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30)
    (directory / f"{digest.stdout.strip()}.0").write_bytes(authority.ca_file.read_bytes())
    return directory


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


# --- the API server ----------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: _ApiServer
    timeout = SOCKET_TIMEOUT

    def do_GET(self) -> None:
        self.server.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        body = json.dumps({"ok": True, "path": self.path}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ApiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, context: ssl.SSLContext | None) -> None:
        super().__init__((LOOPBACK, 0), _Handler)
        self.context = context
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.handshake_failures = 0

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(SOCKET_TIMEOUT)
        if self.context is None:
            super().finish_request(request, client_address)
            return
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            self.handshake_failures += 1  # the client refused our certificate
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            tls.close()


@contextmanager
def api_server(authority: Authority | None) -> Iterator[_ApiServer]:
    """A JSON API on 127.0.0.1: https with the authority's certificate, or plain http."""
    server = _ApiServer(None if authority is None else server_context(authority))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=SOCKET_TIMEOUT)


def url(server: _ApiServer, scheme: str = "https") -> str:
    return f"{scheme}://{LOOPBACK}:{server.server_address[1]}"


# --- the proxy ---------------------------------------------------------------


class ConnectProxy:
    """An HTTP proxy that only tunnels (CONNECT) to 127.0.0.1, and keeps what it saw.

    `heads` are the request heads it read in clear; `tunnelled` is every byte the client sent
    through a tunnel (TLS records, if the client did its job). `refuse` answers every request
    with that status instead (407, say).
    """

    def __init__(self, *, refuse: int | None = None) -> None:
        self.heads: list[bytes] = []
        self.tunnelled = bytearray()
        self.refuse = refuse
        self._lock = threading.Lock()
        self._listener = socket.create_server((LOOPBACK, 0))
        self._listener.settimeout(0.05)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.port = self._listener.getsockname()[1]
        self.url = f"http://{LOOPBACK}:{self.port}"

    def __enter__(self) -> ConnectProxy:
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in list(self._threads):
            thread.join(timeout=TUNNEL_SECONDS + SOCKET_TIMEOUT)
        self._listener.close()

    def _accept(self) -> None:
        deadline = time.monotonic() + 120  # a test's whole life: stop even if never told
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(SOCKET_TIMEOUT)
            head = _read_head(conn)
            with self._lock:
                self.heads.append(head)
            if self.refuse is not None:
                answer = f"HTTP/1.1 {self.refuse} Refused\r\ncontent-length: 0\r\n\r\n"
                conn.sendall(answer.encode())
                return
            method, _, rest = head.partition(b" ")
            target = rest.partition(b" ")[0]
            host, _, port = target.rpartition(b":")
            if method != b"CONNECT" or host != LOOPBACK.encode() or not port.isdigit():
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                return
            with socket.create_connection((LOOPBACK, int(port)), timeout=SOCKET_TIMEOUT) as up:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self._relay(conn, up)

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        deadline = time.monotonic() + TUNNEL_SECONDS
        with selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            while time.monotonic() < deadline and not self._stop.is_set():
                for key, _ in selector.select(timeout=0.1):
                    source = key.fileobj
                    assert isinstance(source, socket.socket)
                    try:
                        data = source.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    if source is client:
                        with self._lock:
                            self.tunnelled += data
                    key.data.sendall(data)


def _read_head(conn: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head and len(head) < MAX_HEAD:
        try:
            chunk = conn.recv(4096)
        except OSError:
            break
        if not chunk:
            break
        head += chunk
    return head
