"""What a company network asks of the one HTTP client: its certificate authorities and its proxy.

The client (http.py) builds httpx with trust_env=False, so httpx reads nothing from the
environment (no .netrc, no variable it might honour in a later release). This module reads
exactly these, and nothing else:

- the system trust store, through the `truststore` package (the OS's own verifier on macOS and
  Windows, OpenSSL's default paths on Linux), plus the PEM file named by SSL_CERT_FILE and the
  hashed directory named by SSL_CERT_DIR when set: a GitHub Enterprise Server behind a private
  certificate authority;
- HTTPS_PROXY (or https_proxy) and NO_PROXY (or no_proxy): a runner whose only way out is a
  proxy. HTTP_PROXY and ALL_PROXY are not read: the API is https (plain http only on loopback).

A proxy carries only a CONNECT tunnel: TLS to the API's origin runs inside it, so the
Authorization header (the token) never reaches the proxy. A plain-http API URL, which
url_problem allows on loopback only, never goes through a proxy: the proxy would read the header.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

# ssl and ipaddress are imported where used: every runner pass imports this module (through
# http.py), while only a pass that asks the API needs them (ssl alone is about 10 ms).
if TYPE_CHECKING:
    import ipaddress
    import ssl

PROXY_SCHEMES = frozenset({"http", "https"})


class NetworkSettingError(Exception):
    """A certificate or proxy variable that cannot be used; the message names it, never a
    password."""

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def ssl_context(env: Mapping[str, str]) -> ssl.SSLContext:
    """A TLS client context that trusts the system store plus SSL_CERT_FILE / SSL_CERT_DIR.

    Certificates and host names are always verified (PROTOCOL_TLS_CLIENT): a variable can add
    authorities, never switch verification off.
    """
    import ssl

    import truststore

    context = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cafile = env.get("SSL_CERT_FILE") or None
    capath = env.get("SSL_CERT_DIR") or None
    if cafile is not None or capath is not None:
        try:
            context.load_verify_locations(cafile=cafile, capath=capath)
        except (OSError, ssl.SSLError) as exc:
            named = " and ".join(
                f"{name}={value!r}"
                for name, value in (("SSL_CERT_FILE", cafile), ("SSL_CERT_DIR", capath))
                if value is not None
            )
            raise NetworkSettingError(
                f"{named}: the certificates cannot be read ({exc.__class__.__name__}: {exc})",
                hint="point SSL_CERT_FILE at a PEM file of CA certificates, or unset it",
            ) from None
    return context


def proxy_for(url: str, env: Mapping[str, str]) -> str | None:
    """The proxy URL to reach `url` through, or None to connect directly.

    Only an https `url` is proxied (see the module's docstring); lower-case variables win over
    upper-case ones, as in curl. A proxy given without a scheme is an http proxy.
    """
    parts = urlsplit(url)
    if parts.scheme != "https" or parts.hostname is None:
        return None
    proxy = (env.get("https_proxy") or env.get("HTTPS_PROXY") or "").strip()
    if not proxy:
        return None
    no_proxy = env.get("no_proxy") or env.get("NO_PROXY") or ""
    if bypassed(parts.hostname, _port(url) or 443, no_proxy):
        return None
    if "://" not in proxy:
        proxy = f"http://{proxy}"
    proxy_parts = urlsplit(proxy)
    scheme = proxy_parts.scheme.lower()
    if scheme not in PROXY_SCHEMES or not proxy_parts.hostname or _port(proxy) == -1:
        shown = proxy_parts._replace(netloc=proxy_parts.netloc.rpartition("@")[2]).geturl()
        raise NetworkSettingError(
            f"HTTPS_PROXY={shown!r} is not an http:// or https:// proxy URL with a host and port",
            hint="set HTTPS_PROXY to http://HOST:PORT (a proxy that accepts CONNECT), or unset it",
        )
    return proxy


def _port(url: str) -> int | None:
    """The URL's port, None when it names none, -1 when it is not a port number."""
    try:
        return urlsplit(url).port
    except ValueError:
        return -1


def bypassed(host: str, port: int, no_proxy: str) -> bool:
    """Whether NO_PROXY names `host` (and `port`): as curl reads it.

    A comma-separated list of `*` (every host), host names (which cover their subdomains; a
    leading `.` or `*.` means the same), IP addresses, CIDR ranges, each with an optional `:port`.
    """
    host = host.lower().strip("[]")
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if entry == "*":
            return True
        name, wanted = _split_port(entry)
        if not name or (wanted is not None and wanted != port):
            continue
        if _matches(host, name):
            return True
    return False


def _split_port(entry: str) -> tuple[str, int | None]:
    """(name, port) of a NO_PROXY entry: `host:port`, `[v6]:port`, a bare IPv6 address."""
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        return name, int(port) if port.isdigit() else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        return name, int(port) if port.isdigit() else None
    return entry, None


def _matches(host: str, name: str) -> bool:
    import ipaddress

    address = _address(host)
    if address is not None:
        if "/" in name:
            try:
                return address in ipaddress.ip_network(name, strict=False)
            except ValueError:
                return False
        return address == _address(name)
    domain = name.removeprefix("*").removeprefix(".")
    return bool(domain) and (host == domain or host.endswith("." + domain))


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    import ipaddress

    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
