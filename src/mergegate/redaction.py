"""Replace secret values and credential-shaped text with *** in job output.

A `Redactor` works on one output stream at a time and holds back the last few hundred bytes it has
seen, so a secret or token split across two reads is still caught. A private key block whose END
line has not arrived yet is dropped as it streams, so a job that dies mid-key never leaks the body.
`RedactedStream` adds counting, hashing and a bounded tail; `redact_text` is for whole strings and
`find_credential` names the credential shape in a string (never its value), and `describe` gives a
value's type and shape for an error message without quoting it. docs/execution.md lists the shapes
and what redaction cannot catch.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

REPLACEMENT = b"***"
# Longest credential shape (prefix plus capped value) the patterns recognise.
PATTERN_WINDOW = 512
_MAX_VALUE = 255


@dataclass(frozen=True)
class _Pattern:
    name: str
    trigger: bytes  # lowercase literal that occurs in every match
    regex: re.Pattern[bytes]  # group "v", when present, is the part replaced
    more: re.Pattern[bytes] | None  # bytes that continue a value past the cap
    on_lower: bool = True  # run on the lowercased buffer (case-insensitive, and fast)
    word_start: bool = False  # the match must not follow a letter, digit or "_"


_VALUE = rb"[^\s'\"&;,]"
_SEP = rb"[\"']?[ \t]{0,8}[:=][ \t]{0,8}[\"']?"


def _assignment(name: str, key: bytes) -> _Pattern:
    # key=value, key: value, "key": "value", and --key value on a command line.
    regex = re.compile(
        re.escape(key) + _SEP + rb"(?P<v>" + _VALUE + rb"{1,255})"
        rb"|--" + re.escape(key) + rb"[ \t]{1,8}(?P<w>" + _VALUE + rb"{1,255})"
    )
    return _Pattern(name, key, regex, re.compile(_VALUE + rb"*"))


_TOKEN_MORE = re.compile(rb"[A-Za-z0-9_-]*")
_ALNUM_MORE = re.compile(rb"[A-Za-z0-9]*")
# A JSON Web Token: three base64url parts, the first a JSON object ("{" is "eyJ"). The lookbehind
# (not just word_start) keeps a long run of "eyJeyJ..." from being tried at every "eyJ" in it.
_JWT = re.compile(
    rb"(?<![A-Za-z0-9_])eyJ[A-Za-z0-9_-]{10,1024}\.[A-Za-z0-9_-]{2,16384}\.[A-Za-z0-9_-]{16,1024}"
)
# Longest JWT whose end the streaming redactor waits for (see Redactor._held_jwt).
JWT_MAX = 20 * 1024
_JWT_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-."


def _token(
    name: str, prefix: bytes, body: bytes, more: re.Pattern[bytes] = _TOKEN_MORE
) -> _Pattern:
    """A token recognised by its literal prefix (case-sensitive, not inside a word)."""
    regex = re.compile(re.escape(prefix) + body)
    return _Pattern(name, prefix.lower(), regex, more, on_lower=False, word_start=True)


_PATTERNS: tuple[_Pattern, ...] = (
    _Pattern(
        "Authorization header",
        b"authorization",
        re.compile(
            rb"authorization"
            + _SEP
            + rb"(?:(?:bearer|basic|token|digest)[ \t]{1,8})?(?P<v>[^\s'\"]{1,255})"
        ),
        re.compile(rb"[^\s'\"]*"),
    ),
    _Pattern(
        "AWS secret access key",
        b"aws_secret_access_key",
        re.compile(rb"aws_secret_access_key" + _SEP + rb"(?P<v>[a-z0-9/+=]{20,255})"),
        re.compile(rb"[A-Za-z0-9/+=]*"),
    ),
    *(_assignment("password assignment", k) for k in (b"password", b"passwd", b"passphrase")),
    _assignment("token assignment", b"token"),
    _assignment("secret assignment", b"secret"),
    *(_assignment("API key assignment", k) for k in (b"api_key", b"apikey", b"api-key")),
    _Pattern(
        "URL with a password",
        b"://",
        re.compile(rb"://[^\s:/@]{1,128}:(?P<v>[^\s@/]{1,255})@"),
        None,
    ),
    *(
        _Pattern(
            "GitHub token",
            p,
            re.compile(re.escape(p) + rb"[A-Za-z0-9]{36,255}"),
            re.compile(rb"[A-Za-z0-9]*"),
            on_lower=False,
            word_start=True,
        )
        for p in (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_")
    ),
    _Pattern(
        "GitHub token",
        b"github_pat_",
        re.compile(rb"github_pat_[A-Za-z0-9_]{22,255}"),
        re.compile(rb"[A-Za-z0-9_]*"),
        on_lower=False,
        word_start=True,
    ),
    *(
        _Pattern(
            "AWS access key id",
            p.lower(),
            re.compile(p + rb"[0-9A-Z]{16}(?![0-9A-Za-z])"),
            None,
            on_lower=False,
            word_start=True,
        )
        for p in (b"AKIA", b"ASIA")
    ),
    _Pattern(
        "Slack token",
        b"xox",
        re.compile(rb"xox[abposr]-[A-Za-z0-9-]{10,255}"),
        _TOKEN_MORE,
        on_lower=False,
        word_start=True,
    ),
    # GitLab's newer tokens go on with ".01.<id>": the dots are part of the value.
    _token("GitLab token", b"glpat-", rb"[A-Za-z0-9_-]{20,255}", re.compile(rb"[A-Za-z0-9_.-]*")),
    _token("Google API key", b"AIza", rb"[A-Za-z0-9_-]{35,255}"),
    _token("npm token", b"npm_", rb"[A-Za-z0-9]{36,255}", _ALNUM_MORE),
    # A PyPI token is a macaroon: base64 that starts "Ag" (its version byte).
    _token("PyPI token", b"pypi-", rb"Ag[A-Za-z0-9_-]{50,255}"),
    # Secret and restricted keys, live and test: one pattern, since every pattern costs a scan.
    _Pattern(
        "Stripe secret key",
        b"k_",
        re.compile(rb"[rs]k_(?:live|test)_[A-Za-z0-9]{20,255}"),
        _ALNUM_MORE,
        on_lower=False,
        word_start=True,
    ),
    _token("Hugging Face token", b"hf_", rb"[A-Za-z0-9]{34,255}", _ALNUM_MORE),
    _Pattern("JSON Web Token", b"eyj", _JWT, _TOKEN_MORE, on_lower=False, word_start=True),
    _Pattern(
        "OpenAI API key",
        b"sk-",
        re.compile(rb"sk-(?:proj-)?[A-Za-z0-9_-]{20,255}"),
        _TOKEN_MORE,
        on_lower=False,
        word_start=True,
    ),
)
_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_PEM_BEGIN = re.compile(rb"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(rb"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END_MAX = 96
# Every pattern match contains one of these single bytes (memchr-fast), so a chunk without any skips
# the much slower per-pattern scan: bulk output stays fast.
_QUICK = (b"-", b"_", b"=", b":", b"A", b"eyJ")

_Span = tuple[int, int, re.Pattern[bytes] | None]


class Redactor:
    """Streaming redaction of one output stream: feed() chunks, then flush() once."""

    def __init__(self, secrets: Sequence[str] = ()) -> None:
        self._secret_text = tuple(secrets)
        self._secrets = tuple(sorted({s.encode() for s in secrets if s}, key=len, reverse=True))
        self._window = max([PATTERN_WINDOW, *(len(s) for s in self._secrets)])
        self._carry = b""
        self._in_pem = False
        self._swallow: re.Pattern[bytes] | None = None

    @property
    def window(self) -> int:
        """Most bytes held back (not yet returned) between calls; up to JWT_MAX while the end
        of the output may be a JWT still arriving."""
        return self._window

    def feed(self, chunk: bytes) -> bytes:
        return self._process(chunk, final=False)

    def flush(self) -> bytes:
        out = self._process(b"", final=True)
        self._carry, self._swallow = b"", None
        return out

    def redact_text(self, text: str) -> str:
        fresh = Redactor(self._secret_text)
        return (fresh.feed(text.encode()) + fresh.flush()).decode("utf-8", "replace")

    def _process(self, data: bytes, *, final: bool) -> bytes:
        if self._swallow is not None and data:
            skip = self._swallow.match(data)
            skipped = skip.end() if skip else 0
            if skipped < len(data):
                self._swallow = None
            data = data[skipped:]
        if self._in_pem:
            buf = self._carry + data
            end_m = _PEM_END.search(buf)
            if end_m is None:
                self._carry = b"" if final else buf[-_PEM_END_MAX:]
                return b""
            self._in_pem, self._carry = False, b""
            return self._process(buf[end_m.end() :], final=final)
        buf = self._carry + data
        spans, open_pem = self._spans(buf)
        if open_pem is not None:
            head = self._emit(buf, spans, open_pem)
            self._in_pem, self._carry = True, b""
            return head + REPLACEMENT + self._process(buf[open_pem:], final=final)
        cut = len(buf) if final else _jwt_start(buf, max(0, len(buf) - self._window))
        for start, end, more in spans:
            if start < cut < end:
                cut = end
                if not final and end == len(buf):
                    # A value longer than the window: drop what follows until it ends.
                    self._swallow = more
        self._carry = buf[cut:]
        return self._emit(buf, [s for s in spans if s[1] <= cut], cut)

    def _spans(self, buf: bytes) -> tuple[list[_Span], int | None]:
        found: list[_Span] = []
        for secret in self._secrets:
            at = buf.find(secret)
            while at >= 0:
                found.append((at, at + len(secret), None))
                at = buf.find(secret, at + len(secret))
        open_pem: int | None = None
        if not any(q in buf for q in _QUICK):
            return _merge(found), None
        low = buf.lower()
        if b"private key" in low:
            pos = 0
            while (begin := _PEM_BEGIN.search(buf, pos)) is not None:
                end_m = _PEM_END.search(buf, begin.end())
                if end_m is None:
                    open_pem = begin.start()
                    break
                found.append((begin.start(), end_m.end(), None))
                pos = end_m.end()
        limit = len(buf) if open_pem is None else open_pem
        for pattern in _PATTERNS:
            if pattern.trigger not in low:
                continue
            text = low if pattern.on_lower else buf
            for m in pattern.regex.finditer(text, 0, limit):
                if pattern.word_start and m.start() > 0 and text[m.start() - 1] in _WORD:
                    continue
                start, end = _value_span(m)
                more = pattern.more.match(text, end) if pattern.more is not None else None
                found.append((start, more.end() if more else end, pattern.more))
        return _merge(found), open_pem

    @staticmethod
    def _emit(buf: bytes, spans: list[_Span], cut: int) -> bytes:
        if not spans:
            return buf[:cut]
        out = bytearray()
        pos = 0
        for start, end, _ in spans:
            if start >= cut:
                break
            out += buf[pos:start]
            out += REPLACEMENT
            pos = end
        out += buf[pos:cut]
        return bytes(out)


class RedactedStream:
    """One output stream: hash and count the raw bytes, redact, keep a bounded tail.

    Holds about 2 * tail_bytes plus the redactor's window whatever the job prints; with `file` set
    the whole redacted stream is written there too.
    """

    def __init__(self, secrets: Sequence[str], tail_bytes: int, file: Path | None = None) -> None:
        self.redactor, self.limit, self.path = Redactor(secrets), tail_bytes, file
        self.raw, self.kept, self.count = hashlib.sha256(), hashlib.sha256(), 0
        self._tail = bytearray()
        self._file: IO[bytes] | None = None if file is None else file.open("wb")

    def write(self, data: bytes) -> None:
        self.raw.update(data)
        self.count += len(data)
        self._keep(self.redactor.feed(data))

    def _keep(self, out: bytes) -> None:
        if self._file is not None:
            self._file.write(out)
            self.kept.update(out)
        if len(out) >= self.limit:
            self._tail = bytearray(out[len(out) - self.limit :])
        else:
            self._tail += out
            if len(self._tail) > 2 * self.limit:
                del self._tail[: len(self._tail) - self.limit]

    def close(self) -> str:
        """Flush, close the file, and return the tail: UTF-8, at most tail_bytes encoded."""
        self._keep(self.redactor.flush())
        if self._file is not None:
            self._file.close()
        data = bytes(self._tail[max(0, len(self._tail) - self.limit) :])
        text = data[_skip_continuation(data) :].decode("utf-8", "replace")
        encoded = text.encode()
        if len(encoded) > self.limit:  # a replacement character is 3 bytes for 1 invalid byte
            encoded = encoded[len(encoded) - self.limit :]
            text = encoded[_skip_continuation(encoded) :].decode()
        return text


def _jwt_start(buf: bytes, cut: int) -> int:
    """`cut`, or earlier where a JWT that may still be arriving starts.

    A JWT can be far longer than the window, and only a whole one matches: without this, its
    first part would be emitted before its signature arrived, and the rest would not look like
    a JWT any more. So the run of JWT characters that ends the buffer is held back from an "eyJ"
    at a word start with at most two dots after it, up to JWT_MAX bytes.
    """
    run = len(buf.rstrip(_JWT_CHARS))
    if run >= cut or len(buf) - run > JWT_MAX:
        return cut
    at = buf.find(b"eyJ", run, cut + 2)  # one that starts before the cut
    while at >= 0:
        if (at == run or buf[at - 1] not in _WORD) and buf.count(b".", at) <= 2:
            return at
        at = buf.find(b"eyJ", at + 1, cut + 2)
    return cut


def _skip_continuation(data: bytes) -> int:
    start = 0
    while start < min(3, len(data)) and 0x80 <= data[start] < 0xC0:
        start += 1
    return start


def _value_span(m: re.Match[bytes]) -> tuple[int, int]:
    for group in ("v", "w"):
        if group in m.re.groupindex and m.group(group) is not None:
            return m.span(group)
    return m.span()


def _merge(spans: list[_Span]) -> list[_Span]:
    merged: list[_Span] = []
    for start, end, more in sorted(spans, key=lambda s: (s[0], -s[1])):
        if merged and start < merged[-1][1]:
            last = merged[-1]
            if end > last[1]:
                merged[-1] = (last[0], end, more)
            continue
        merged.append((start, end, more))
    return merged


def redact_text(text: str, secrets: Sequence[str] = ()) -> str:
    """Redact a complete string (error messages, reasons, records)."""
    return Redactor(secrets).redact_text(text)


def find_credential(text: str) -> str | None:
    """Name of the first credential shape in `text` (never the value), or None."""
    data = text.encode()
    if _PEM_BEGIN.search(data):
        return "private key"
    low = data.lower()
    for pattern in _PATTERNS:
        for m in pattern.regex.finditer(low if pattern.on_lower else data):
            if not (pattern.word_start and m.start() > 0 and data[m.start() - 1] in _WORD):
                return pattern.name
    return None


def describe(value: object) -> str:
    """A value's type and shape for an error message, never the value itself.

    "str (looks like a GitHub token)", "str of 12 characters", "list of 2 items", "null": what
    a person needs to see what is wrong with a field, with nothing a log or a record should not
    keep (a secret pasted in the wrong field is named by its shape, as the redactor would mask it).
    """
    if value is None:
        return "null"
    if isinstance(value, bool | int | float):
        return type(value).__name__
    if isinstance(value, str | bytes):
        kind = type(value).__name__
        text = value if isinstance(value, str) else value.decode("utf-8", "replace")
        shape = find_credential(text)
        if shape is not None:
            return f"{kind} (looks like {_article(shape)} {shape})"
        if not value:
            return f"empty {kind}"
        return f"{kind} of {len(value)} {'character' if kind == 'str' else 'byte'}{_s(len(value))}"
    if isinstance(value, list | tuple):
        return f"list of {len(value)} item{_s(len(value))}"
    if isinstance(value, dict):
        return f"mapping of {len(value)} key{_s(len(value))}"
    return type(value).__name__


def _article(name: str) -> str:
    # By sound: "an AWS access key id", "an npm token", but "a URL with a password".
    return "an" if name[0] in "AEIOaeio" or name.startswith("npm") else "a"


def _s(count: int) -> str:
    return "" if count == 1 else "s"
