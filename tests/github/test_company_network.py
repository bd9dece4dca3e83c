"""Company networks: a private certificate authority (SSL_CERT_FILE, SSL_CERT_DIR) and a proxy
(HTTPS_PROXY, NO_PROXY), with every rule of the one HTTP client kept: the token goes only to the
API's origin, inside TLS, never to the proxy.

All on loopback (tests/helpers/company_network.py): a TLS server whose certificate a CA made
here signed, and a CONNECT proxy that records what it saw.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from mergegate.github import network
from mergegate.github.http import Client, Unreachable
from tests.helpers.company_network import (
    Authority,
    ConnectProxy,
    api_server,
    hashed_directory,
    make_authority,
    server_context,
    url,
)
from tests.helpers.fake_github import FakeGitHub
from tests.helpers.github_world import ALICE, GithubGate
from tests.helpers.repos import World

TOKEN = "ghs_company_network_token_must_stay_inside_tls_42"
VARIABLES = (
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTPS_PROXY",
    "https_proxy",
    "NO_PROXY",
    "no_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
)


@pytest.fixture(autouse=True)
def _no_network_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return make_authority(tmp_path_factory.mktemp("private-ca"))


def _get(base: str) -> dict[str, object]:
    with Client(base, token=TOKEN, timeout=5.0, max_wait=0.0) as api:
        data = api.get("/repos/acme/gate").json()
    assert isinstance(data, dict)
    return data


# --- certificates --------------------------------------------------------------------------


def test_a_private_ca_is_refused_until_ssl_cert_file_names_it(
    authority: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    with api_server(authority) as server:
        with pytest.raises(Unreachable) as info:
            _get(url(server))
        assert "CERTIFICATE_VERIFY_FAILED" in str(info.value)
        assert info.value.hint is not None and "SSL_CERT_FILE" in info.value.hint
        assert server.seen == []  # refused before any request, so before any header

        monkeypatch.setenv("SSL_CERT_FILE", str(authority.ca_file))
        assert _get(url(server)) == {"ok": True, "path": "/repos/acme/gate"}
    assert server.seen[0][1]["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to hash the CA's name")
def test_ssl_cert_dir_adds_a_hashed_directory_of_cas(
    authority: Authority, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_DIR", str(hashed_directory(authority, tmp_path / "certs")))
    with api_server(authority) as server:
        assert _get(url(server))["ok"] is True


def test_an_unreadable_ssl_cert_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "no-such-ca.pem"
    monkeypatch.setenv("SSL_CERT_FILE", str(missing))
    with pytest.raises(Unreachable) as info:
        Client("https://127.0.0.1:9", token=TOKEN)
    assert f"SSL_CERT_FILE={str(missing)!r}" in str(info.value) and info.value.hint


def test_a_variable_adds_trust_and_never_turns_checks_off(authority: Authority) -> None:
    context = network.ssl_context({"SSL_CERT_FILE": str(authority.ca_file)})
    assert context.check_hostname and context.verify_mode.name == "CERT_REQUIRED"


# --- the proxy -----------------------------------------------------------------------------


@pytest.fixture
def tls(authority: Authority, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.ca_file))
    with api_server(authority) as server:
        yield url(server)


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy"])
def test_https_proxy_carries_a_connect_tunnel_and_never_the_token(
    tls: str, variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ConnectProxy() as proxy:
        monkeypatch.setenv(variable, proxy.url)
        assert _get(tls)["ok"] is True
    port = tls.rsplit(":", 1)[1]
    assert [head.split(b"\r\n", 1)[0] for head in proxy.heads] == [
        f"CONNECT 127.0.0.1:{port} HTTP/1.1".encode()
    ]
    assert b"authorization" not in proxy.heads[0].lower()
    assert TOKEN.encode() not in proxy.heads[0]
    # What went through the tunnel was TLS: the header and the token were inside it, unreadable.
    assert len(proxy.tunnelled) > 100
    assert TOKEN.encode() not in proxy.tunnelled and b"/repos/acme/gate" not in proxy.tunnelled


@pytest.mark.parametrize(
    "no_proxy", ["127.0.0.1", "localhost,127.0.0.1", "127.0.0.0/8", "*", " 127.0.0.1 "]
)
def test_no_proxy_goes_direct(tls: str, no_proxy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with ConnectProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", no_proxy)
        assert _get(tls)["ok"] is True
    assert proxy.heads == []


def test_a_no_proxy_for_other_hosts_still_proxies(
    tls: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = int(tls.rsplit(":", 1)[1])
    with ConnectProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("no_proxy", f"example.com,127.0.0.2,127.0.0.1:{port + 1}")
        assert _get(tls)["ok"] is True
    assert len(proxy.heads) == 1


def test_plain_http_on_loopback_is_never_proxied(monkeypatch: pytest.MonkeyPatch) -> None:
    # Through a proxy, plain http would hand it the Authorization header.
    with ConnectProxy() as proxy, api_server(None) as server:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("ALL_PROXY", proxy.url)
        assert _get(url(server, "http"))["ok"] is True
    assert proxy.heads == []


def test_a_refusing_proxy_is_unreachable_and_its_password_stays_out(
    tls: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ConnectProxy(refuse=407) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url.replace("://", "://me:proxy-s3cret@"))
        with pytest.raises(Unreachable) as info:
            _get(tls)
    assert "through the proxy in HTTPS_PROXY" in str(info.value)
    assert "proxy-s3cret" not in str(info.value) and TOKEN not in str(info.value)
    # The proxy's own credential goes to the proxy (that is what it is for); the token does not.
    assert b"proxy-authorization: basic" in proxy.heads[0].lower()
    assert b"\r\nauthorization" not in proxy.heads[0].lower()


@pytest.mark.parametrize(
    "proxy",
    ["socks5://user:pw-s3cret@127.0.0.1:1080", "http://user:pw-s3cret@127.0.0.1:port", "http://"],
)
def test_a_proxy_that_is_no_http_proxy_is_refused_by_name(
    proxy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    with pytest.raises(Unreachable) as info:
        Client("https://127.0.0.1:9", token=TOKEN)
    assert "HTTPS_PROXY" in str(info.value) and "pw-s3cret" not in str(info.value)


def test_netrc_is_still_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # trust_env stays False: only the variables above are read, never ~/.netrc.
    home = tmp_path / "netrc-home"
    home.mkdir()
    (home / ".netrc").write_text("machine 127.0.0.1 login someone password netrc-s3cret\n")
    (home / ".netrc").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NETRC", str(home / ".netrc"))
    with api_server(None) as server, Client(url(server, "http"), timeout=5.0) as api:
        api.get("/x")
    assert "authorization" not in server.seen[0][1]


# --- the whole runner ----------------------------------------------------------------------


def test_a_runner_behind_a_proxy_reads_reviews_from_a_private_ca_api(
    world: World, authority: Authority
) -> None:
    with FakeGitHub(tls=server_context(authority)) as fake, ConnectProxy() as proxy:
        gate = GithubGate(world, fake)
        gate.setup()
        gate.reviewed_merge("backup", ALICE)
        assert fake.url.startswith("https://127.0.0.1:")

        untrusted = gate.run_once(env={"HTTPS_PROXY": proxy.url})
        assert untrusted.code == 1, untrusted.err
        reason = untrusted.json()["waiting"]["reason"]
        assert "CERTIFICATE_VERIFY_FAILED" in reason and "through the proxy" in reason
        # The waiting line is all a person reads: it says what to do (a walk-through found it
        # said only what failed).
        assert "hint: " in reason and "SSL_CERT_FILE" in reason

        missing = str(world.tmp / "no-such-ca.pem")
        unreadable = gate.run_once(env={"HTTPS_PROXY": proxy.url, "SSL_CERT_FILE": missing})
        assert unreadable.code == 1, unreadable.err
        reason = unreadable.json()["waiting"]["reason"]
        assert reason.startswith("waiting for evidence: ") and missing in reason
        assert "hint: point SSL_CERT_FILE at a PEM file" in reason

        trusted = gate.run_once(
            env={"HTTPS_PROXY": proxy.url, "SSL_CERT_FILE": str(authority.ca_file)}
        )
        assert trusted.code == 0, trusted.err
        out = trusted.json()
        assert [(j["job"], j["status"]) for j in out["jobs"]] == [("backup", "succeeded")]
        assert fake.requests and all(
            headers.get("authorization", "").startswith("Bearer ")
            for _, _, headers in fake.requests
        )
    token = fake.env()["GITHUB_TOKEN"].encode()
    assert proxy.heads and all(head.startswith(b"CONNECT 127.0.0.1:") for head in proxy.heads)
    assert not any(token in head or b"authorization:" in head.lower() for head in proxy.heads)
    assert token not in proxy.tunnelled


# --- NO_PROXY, as curl reads it ------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "expected"),
    [
        ("ghe.corp.example", 443, "corp.example", True),
        ("ghe.corp.example", 443, ".corp.example", True),
        ("ghe.corp.example", 443, "*.corp.example", True),
        ("corp.example", 443, ".corp.example", True),
        ("ghe.corp.example", 443, "ghe.corp.example:443", True),
        ("ghe.corp.example", 8443, "ghe.corp.example:443", False),
        ("GHE.Corp.Example", 443, "ghe.corp.EXAMPLE", True),
        ("notcorp.example", 443, "corp.example", False),
        ("corp.example.evil", 443, "corp.example", False),
        ("api.github.com", 443, "", False),
        ("api.github.com", 443, ",,", False),
        ("10.1.2.3", 443, "10.0.0.0/8", True),
        ("11.1.2.3", 443, "10.0.0.0/8", False),
        ("1.2.3.4", 443, "3.4", False),
        ("::1", 443, "::1", True),
        ("::1", 443, "[::1]:443", True),
        ("::1", 443, "[::1]:8443", False),
        ("api.github.com", 443, "*", True),
    ],
)
def test_no_proxy_entries(host: str, port: int, no_proxy: str, expected: bool) -> None:
    assert network.bypassed(host, port, no_proxy) is expected


def test_proxy_choice() -> None:
    env = {"HTTPS_PROXY": "proxy.corp:3128", "https_proxy": "", "NO_PROXY": "internal"}
    assert network.proxy_for("https://api.github.com", env) == "http://proxy.corp:3128"
    assert network.proxy_for("https://ghe.internal/api/v3", env) is None
    assert network.proxy_for("http://127.0.0.1:8080", env) is None
    assert network.proxy_for("https://api.github.com", {}) is None
    lower_wins = {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2"}
    assert network.proxy_for("https://api.github.com", lower_wins) == "http://lower:2"
