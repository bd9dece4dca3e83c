"""The one HTTP client: every request mergegate makes goes through `Client`.

Built on httpx. What this module adds is what a gate needs from it:
- every request has a timeout per read and a deadline in all (a server trickling a byte
  every few seconds cannot hold a pass), the pass's requests a budget in all, and a body
  is read only up to a bound;
- a rate limit (`403`/`429` with `retry-after` or `x-ratelimit-reset`) is waited
  out only within a bound, else it is a "not yet" for this pass;
- every failure is an `Unavailable` (a `NotYet`): missing evidence is never a yes;
- the token goes in one header and nowhere else: not in errors, logs, `Response`
  values or URLs, and it is sent only to the API's own origin (a `Link` header or
  a redirect pointing elsewhere is refused, not followed);
- TLS trusts the system store plus SSL_CERT_FILE / SSL_CERT_DIR, and HTTPS_PROXY / NO_PROXY
  are honoured with CONNECT tunnels only (network.py); nothing else is read from the
  environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import urljoin, urlsplit

if TYPE_CHECKING:
    import ssl

    import httpx

from mergegate import __version__
from mergegate.errors import NotYet
from mergegate.github import network

DEFAULT_TIMEOUT = 15.0  # seconds, per connect/read/write
DEFAULT_DEADLINE = 60.0  # seconds one request may take in all, however its bytes trickle in
DEFAULT_MAX_API_TIME = 600.0  # seconds a pass's requests may take in all (one client per pass)
DEFAULT_MAX_BODY = 8 * 1024 * 1024  # bytes; a reviews page of 100 is well under 1 MiB
DEFAULT_MAX_WAIT = 60.0  # seconds a pass may wait out rate limits, in all (one client per pass)
MIN_WAIT = (
    1.0  # seconds: a `retry-after: 0` (or negative, or a past date) must not become a busy loop
)
MAX_RATE_RETRIES = 3  # rate-limit retries of one request; then "not yet" for this pass
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
_RETRY_STATUSES = frozenset({502, 503, 504})  # transient gateway errors: one quick retry
# ... of a request asking again cannot repeat: a POST answered 502 may have made its comment.
_RETRY_METHODS = frozenset({"GET", "HEAD", "PATCH"})  # (mergegate's PATCH sets a whole body)

# The GitHub edge: a JSON object as GitHub answered it (its members are input: each is checked
# where it is read).
ApiObject: TypeAlias = dict[str, Any]


# The hint of an answer that is only late: nothing for a person to do. Any other hint (a private
# CA's SSL_CERT_FILE, a token's permissions) is advice the runner's waiting line repeats.
AGAIN = "the next pass asks again"


class Unavailable(NotYet):
    """An HTTP answer that is not (yet) usable evidence."""

    def __init__(
        self, message: str, *, url: str, status: int | None = None, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.url = url
        self.status = status


class Unreachable(Unavailable):
    """No answer: connection refused, DNS, TLS, or a timeout."""


class BadStatus(Unavailable):
    """An answer with a status other than 2xx (401, 404, 5xx...)."""


class RateLimited(BadStatus):
    """A rate limit whose reset is further away than this pass may wait."""

    def __init__(self, message: str, *, url: str, status: int, reset_in: float | None) -> None:
        super().__init__(
            message,
            url=url,
            status=status,
            hint="the next pass retries; a token with a higher limit helps",
        )
        self.reset_in = reset_in


class Malformed(Unavailable):
    """An answer whose body is not what the API documents (not JSON, wrong shape, too large)."""


class TooLarge(Malformed):
    """Answers past a size bound (a body, a listing's pages, all answers about one merge): what
    they are about is decided (refused as unreviewable), never waited for."""


@dataclass(frozen=True)
class Response:
    """One answer, as evidence: what was asked, what came back, when, and its hash."""

    url: str  # without query secrets: mergegate never puts a token in a URL
    status: int
    request_id: str  # x-github-request-id, "" when absent
    at: str  # RFC 3339 UTC time the answer arrived
    body: bytes
    link: str = ""  # the Link header, for pagination
    retry_after: float | None = None  # seconds, from retry-after
    ratelimit_remaining: str | None = None
    ratelimit_reset: float | None = None  # epoch seconds, from x-ratelimit-reset

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.body).hexdigest()

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise Malformed(
                f"GET {self.url}: the body is not JSON ({exc.__class__.__name__})",
                url=self.url,
                status=self.status,
            ) from None

    def next_url(self) -> str | None:
        """The `rel="next"` target of the Link header (RFC 8288), if any."""
        return next_link(self.link)


def next_link(link: str) -> str | None:
    """The `rel="next"` target of a Link header value (RFC 8288), if any."""
    for part in link.split(","):
        target, _, params = part.strip().partition(";")
        target = target.strip()
        if not (target.startswith("<") and target.endswith(">")):
            continue
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            # rel may hold several types (RFC 8288: rel="next last")
            if name.strip().lower() == "rel" and "next" in value.strip().strip('"').split():
                return target[1:-1]
    return None


def _now() -> datetime:
    return datetime.now(UTC)


class Client:
    """A small JSON-over-HTTPS client for one API origin."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_body: int = DEFAULT_MAX_BODY,
        max_wait: float = DEFAULT_MAX_WAIT,
        deadline: float = DEFAULT_DEADLINE,
        max_api_time: float = DEFAULT_MAX_API_TIME,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], datetime] = _now,
        transport: httpx.BaseTransport | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        problem = url_problem(base_url)
        if problem:
            raise Unreachable(
                f"API URL {redact_url(base_url)!r} {problem}", url=redact_url(base_url)
            )
        self.base_url = base_url.rstrip("/")
        self._origin = _origin(self.base_url)
        self.max_body = max_body
        self.max_wait = max_wait
        self._sleep = sleep
        self._now = now
        self.waited = (
            0.0  # seconds this client has slept on rate limits: max_wait bounds the whole pass
        )
        self.deadline = deadline
        self.max_api_time = max_api_time
        self.spent = 0.0  # seconds this client's requests took: max_api_time bounds the pass
        # Every socket this client opened, so a request past its deadline can be cut off even
        # while a read blocks (httpx's timeouts are per read; a trickle resets them).
        self._sockets: list[socket.socket] = []
        headers = {
            "accept": "application/vnd.github+json",
            "x-github-api-version": "2022-11-28",
            "user-agent": f"mergegate/{__version__}",
        }
        if token:
            headers["authorization"] = f"Bearer {token}"
        # here, not at the top: an idle pass that asks GitHub nothing never pays its import
        import httpx

        env = os.environ if env is None else env
        try:
            context = network.ssl_context(env)
            # A given transport (tests) is the whole network: a proxy mount would bypass it.
            proxy = None if transport is not None else network.proxy_for(self.base_url, env)
        except network.NetworkSettingError as exc:
            raise Unreachable(str(exc), url=self.base_url, hint=exc.hint) from None
        self.proxied = proxy is not None
        # follow_redirects=False: a redirect is an answer we refuse, so the token never travels.
        # trust_env=False: httpx reads no .netrc and no variable; network.py reads the few we
        # honour. The proxy gets only CONNECT (the API is https), so it never sees the headers.
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
            transport=transport,
            trust_env=False,
            verify=context,
            proxy=None if proxy is None else _proxy(proxy, context),
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def url(self, path: str) -> str:
        """An absolute URL for an API path; absolute URLs must be on the API's origin."""
        url = path if "://" in path else urljoin(self.base_url + "/", path.lstrip("/"))
        if _origin(url) != self._origin:
            raise Malformed(
                f"refusing to send a request to {_origin(url)}, which is not the API's origin "
                f"{self._origin}",
                url=url,
            )
        return url

    def get(self, path: str, *, params: Mapping[str, str | int] | None = None) -> Response:
        return self.request("GET", path, params=params)

    def post(self, path: str, *, body: Any) -> Response:
        return self.request("POST", path, body=body)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Any = None,
    ) -> Response:
        import httpx

        url = self.url(path)
        if params:
            url = str(httpx.URL(url).copy_merge_params(dict(params)))
        retried = False
        limited = 0
        while True:
            response = self._once(method, url, body)
            if 200 <= response.status < 300:
                return response
            wait = self._rate_limit_wait(response)
            if wait is not None:
                wait = max(MIN_WAIT, wait)
                limited += 1
                if limited > MAX_RATE_RETRIES or self.waited + wait > self.max_wait:
                    raise RateLimited(
                        f"{method} {url}: rate limited ({response.status}), resets in {wait:.0f}s, "
                        f"more than this pass still waits ({self.max_wait - self.waited:.0f}s)",
                        url=url,
                        status=response.status,
                        reset_in=wait,
                    )
                self._sleep(wait)
                self.waited += wait
                continue
            if response.status in _RETRY_STATUSES and method in _RETRY_METHODS and not retried:
                retried = True
                self._sleep(min(1.0, max(0.0, self.max_wait - self.waited)))
                continue
            raise BadStatus(
                f"{method} {url}: HTTP {response.status}{_message(response)}",
                url=url,
                status=response.status,
                hint=AGAIN if response.status >= 500 else _status_hint(response.status),
            )

    def _once(self, method: str, url: str, body: Any) -> Response:
        import httpx

        allowed = min(self.deadline, self.max_api_time - self.spent)
        if allowed <= 0:
            raise Unreachable(
                f"{method} {url}: this pass's requests to GitHub took {_secs(self.spent)}, its "
                f"budget ({_secs(self.max_api_time)})",
                url=url,
                hint=AGAIN,
            )
        content = None if body is None else json.dumps(body).encode()
        start = time.monotonic()
        late = threading.Event()

        def cut_off() -> None:  # past the deadline: end the blocked read, whatever it waits for
            late.set()
            for sock in self._sockets:
                try:
                    # The plain socket's shutdown, on a TLS socket too: its own would drop the TLS
                    # state under the thread still reading.
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass

        timer = threading.Timer(allowed, cut_off)
        timer.daemon = True
        timer.start()
        try:
            with self._http.stream(
                method,
                url,
                content=content,
                headers={"content-type": "application/json"} if content is not None else None,
                extensions={"trace": self._trace},
            ) as raw:
                data = bytearray()
                for chunk in raw.iter_bytes():
                    data += chunk
                    if len(data) > self.max_body:
                        raise TooLarge(
                            f"{method} {url}: the body is larger than {self.max_body} bytes",
                            url=url,
                            status=raw.status_code,
                        )
                    if late.is_set() or time.monotonic() - start > allowed:
                        raise httpx.ReadTimeout("past the deadline")
                return _response(raw, url, bytes(data), self._now())
        except httpx.TimeoutException:
            if late.is_set() or time.monotonic() - start >= allowed:
                raise self._late(method, url, allowed) from None
            raise Unreachable(f"{method} {url}: timed out", url=url, hint=AGAIN) from None
        except httpx.TransportError as exc:
            if late.is_set():
                raise self._late(method, url, allowed) from None
            # The exception text names the host and the OS error, never a header (nor the proxy's
            # URL, which may hold its password).
            via = " (through the proxy in HTTPS_PROXY)" if self.proxied else ""
            raise Unreachable(
                f"{method} {url}{via}: {exc.__class__.__name__}: {exc}",
                url=url,
                hint=_transport_hint(str(exc)),
            ) from None
        finally:
            timer.cancel()
            self.spent += time.monotonic() - start
            if late.is_set():
                self._sockets.clear()  # shut down: the pool opens new ones

    def _late(self, method: str, url: str, allowed: float) -> Unreachable:
        which = (
            "its deadline"
            if allowed >= self.deadline
            else f"what is left of this pass's {_secs(self.max_api_time)} for GitHub"
        )
        return Unreachable(
            f"{method} {url}: no complete answer within {_secs(allowed)} ({which})",
            url=url,
            hint=AGAIN,
        )

    def _trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpcore's trace hook: keep the socket of every connection this client opens."""
        if event.endswith((".connect_tcp.complete", ".start_tls.complete")):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                self._sockets = [s for s in self._sockets if s.fileno() != -1]
                self._sockets.append(sock)

    def _rate_limit_wait(self, response: Response) -> float | None:
        """Seconds to wait before asking again, when the answer is a rate limit."""
        if response.status not in (403, 429):
            return None
        if response.retry_after is not None:
            return max(0.0, response.retry_after)
        if response.ratelimit_remaining == "0" and response.ratelimit_reset is not None:
            return max(0.0, response.ratelimit_reset - self._now().timestamp()) + 1.0
        if response.status == 429:
            return 60.0  # rate limited without saying until when: GitHub asks for at least a minute
        return None  # a plain 403: permission, not a limit


def _proxy(url: str, context: ssl.SSLContext) -> httpx.Proxy:
    """The proxy; one reached over TLS (https://) is verified with the same trust as the API."""
    import httpx

    tls = url.lower().startswith("https://")
    return httpx.Proxy(url, ssl_context=context if tls else None)


def _response(raw: httpx.Response, url: str, body: bytes, now: datetime) -> Response:
    headers = raw.headers
    retry_after: float | None = None
    if "retry-after" in headers:
        value = headers["retry-after"].strip()
        try:
            retry_after = float(value)
        except ValueError:
            # Imported here: the email package is most of this module's import, and every runner
            # pass imports this module (github.py) while only a rate-limited answer with a date
            # needs it.
            from email.utils import parsedate_to_datetime

            try:
                retry_after = (parsedate_to_datetime(value) - now).total_seconds()
            except (TypeError, ValueError):
                retry_after = None
    reset: float | None = None
    try:
        reset = float(headers["x-ratelimit-reset"]) if "x-ratelimit-reset" in headers else None
    except ValueError:
        reset = None
    return Response(
        url=url,
        status=raw.status_code,
        request_id=headers.get("x-github-request-id", ""),
        at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        body=body,
        link=headers.get("link", ""),
        retry_after=retry_after,
        ratelimit_remaining=headers.get("x-ratelimit-remaining"),
        ratelimit_reset=reset,
    )


def url_problem(url: str) -> str:
    """Why `url` may not be an API base URL ("" when it may): the token goes to it in a header."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return "is not an http(s) URL"
    if parts.username is not None or parts.password is not None:
        return (
            "holds credentials (user:password@): the token comes from GITHUB_TOKEN, and URLs "
            "are stored in evidence"
        )
    if parts.scheme == "http" and parts.hostname not in LOOPBACK:
        return (
            "is plain http to a host that is not loopback: the token would travel in clear text "
            "(use https)"
        )
    return ""


def redact_url(url: str) -> str:
    """`url` without any user:password@ part (for messages and stored evidence)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _message(response: Response) -> str:
    """GitHub's own one-line `message`, bounded, when the body has one."""
    try:
        data = json.loads(response.body)
    except (UnicodeDecodeError, ValueError):
        return ""
    message = data.get("message") if isinstance(data, dict) else None
    return f": {message[:200]}" if isinstance(message, str) and message else ""


def _transport_hint(error: str) -> str:
    if "CERTIFICATE_VERIFY_FAILED" in error:
        return (
            "the server's certificate is not trusted here: for a private certificate authority "
            "set SSL_CERT_FILE to its PEM file (docs/github.md, company networks)"
        )
    return AGAIN


def _secs(seconds: float) -> str:
    return f"{round(seconds, 1):g}s"


def _status_hint(status: int) -> str:
    if status == 401:
        return "GITHUB_TOKEN (or GH_TOKEN) is missing, expired or wrong"
    if status in (403, 404):
        return (
            "the token cannot read this repository (in Actions: permissions: pull-requests: "
            "read, contents: read)"
        )
    return AGAIN
