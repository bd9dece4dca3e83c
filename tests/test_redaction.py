"""Streaming redaction: split secrets, every built-in credential shape, credential names."""

from __future__ import annotations

import hashlib

import pytest

from mergegate.redaction import (
    PATTERN_WINDOW,
    RedactedStream,
    Redactor,
    find_credential,
    redact_text,
)

GITHUB = "ghp_" + "A1b2C3d4E5" * 3 + "f6G7h8"
PEM_BODY = "MIIEpAIBAAKCAQEAbodyXYZ\nk3Y0m0reBodyLines+/==\n"

# (name find_credential reports, text containing it, the part that must vanish)
SAMPLES = [
    (
        "private key",
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}-----END RSA PRIVATE KEY-----",
        PEM_BODY,
    ),
    (
        "private key",
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}-----END OPENSSH PRIVATE KEY-----",
        PEM_BODY,
    ),
    (
        "Authorization header",
        "Authorization: Bearer eyJhbGciOi.payload.sig",
        "eyJhbGciOi.payload.sig",
    ),
    ("Authorization header", "authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ("password assignment", "password=hunter2!", "hunter2!"),
    ("password assignment", "DB_PASSWD: 'c0rrect-h0rse'", "c0rrect-h0rse"),
    ("password assignment", "mysql --password=s3cr3tpw", "s3cr3tpw"),
    ("password assignment", "login --password s3cr3tpw", "s3cr3tpw"),
    ("token assignment", "export NPM_TOKEN=npm_abcdef123456", "npm_abcdef123456"),
    ("token assignment", '{"token": "tok-998877"}', "tok-998877"),
    ("secret assignment", "client_secret=cs-112233445566", "cs-112233445566"),
    ("API key assignment", "X-Api-Key: key-0099887766", "key-0099887766"),
    ("API key assignment", "api_key=ak_live_123456789", "ak_live_123456789"),
    ("GitHub token", f"cloning with {GITHUB} now", GITHUB),
    ("GitHub token", "ghs_" + "x" * 36, "ghs_" + "x" * 36),
    (
        "GitHub token",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    ),
    ("AWS access key id", "key AKIAIOSFODNN7EXAMPLE in use", "AKIAIOSFODNN7EXAMPLE"),
    ("AWS access key id", "ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A"),
    (
        "AWS secret access key",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    ("Slack token", "xoxb-123456789012-abcdefABCDEF", "xoxb-123456789012-abcdefABCDEF"),
    ("OpenAI API key", "sk-abcdefghijklmnopqrstuvwx12", "sk-abcdefghijklmnopqrstuvwx12"),
    (
        "OpenAI API key",
        "sk-proj-abcdefghijklmnopqrstuvwx12_-Z",
        "sk-proj-abcdefghijklmnopqrstuvwx12_-Z",
    ),
    ("URL with a password", "https://deploy:pa55w0rd@git.example.com/repo", "pa55w0rd"),
]


def _stream(redactor: Redactor, chunks: list[bytes]) -> bytes:
    return b"".join(redactor.feed(chunk) for chunk in chunks) + redactor.flush()


def test_secret_split_at_every_position_is_redacted() -> None:
    secret = "Zq8-very-secret-value-Xy7"
    data = f"start {secret} middle {secret}\nend".encode()
    for cut in range(len(data) + 1):
        out = _stream(Redactor((secret,)), [data[:cut], data[cut:]])
        assert out == b"start *** middle ***\nend", cut


def test_secret_split_into_three_pieces_and_single_bytes() -> None:
    secret = "hunter2-hunter2"
    data = f"a{secret}b".encode()
    for i in range(len(data) + 1):
        for j in range(i, len(data) + 1):
            assert _stream(Redactor((secret,)), [data[:i], data[i:j], data[j:]]) == b"a***b", (i, j)
    assert _stream(Redactor((secret,)), [bytes([b]) for b in data]) == b"a***b"


@pytest.mark.parametrize(("name", "text", "value"), SAMPLES)
def test_builtin_pattern_is_redacted_and_named(name: str, text: str, value: str) -> None:
    out = redact_text(text)
    assert value not in out and "***" in out
    assert find_credential(text) == name
    data = f"prefix {text} suffix\n".encode()
    for cut in range(0, len(data) + 1, 3):
        streamed = _stream(Redactor(), [data[:cut], data[cut:]]).decode()
        assert streamed == f"prefix {out} suffix\n", cut


def test_assignment_keeps_the_name_and_drops_the_value() -> None:
    assert redact_text("password=hunter2 user=bob") == "password=*** user=bob"
    assert redact_text("Authorization: Bearer abc.def") == "Authorization: Bearer ***"


def test_unterminated_private_key_body_is_never_emitted() -> None:
    redactor = Redactor()
    emitted = redactor.feed(b"log line\n-----BEGIN PRIVATE KEY-----\nSECRETBODY1\n")
    for _ in range(100):
        emitted += redactor.feed(b"SECRETBODY2" * 50 + b"\n")
    emitted += redactor.feed(b"-----END PRIV") + redactor.feed(b"ATE KEY-----\nvisible again\n")
    emitted += redactor.flush()
    assert emitted == b"log line\n***\nvisible again\n"
    cut_short = Redactor()
    assert _stream(cut_short, [b"-----BEGIN EC PRIVATE KEY-----\nBODY", b"MORE"]) == b"***"


def test_value_longer_than_the_window_is_dropped_to_its_end() -> None:
    data = b"token=" + b"Q" * (5 * PATTERN_WINDOW) + b" visible"
    chunks = [data[i : i + 100] for i in range(0, len(data), 100)]
    assert _stream(Redactor(), chunks) == b"token=*** visible"


def test_carry_over_stays_bounded() -> None:
    redactor = Redactor(("x" * 1000,))
    emitted = sum(len(redactor.feed(b"y" * 65536)) for _ in range(64))
    assert 64 * 65536 - emitted == redactor.window == 1000
    assert len(redactor.flush()) == 1000


def test_benign_text_is_left_alone() -> None:
    for text in (
        "hello world",
        "max_tokens: 100",
        "PWD=/work",
        "task-runner-configuration-x",
        "see https://example.com:8080/path",
        "AKIA too short",
        "password reset page",
    ):
        assert find_credential(text) is None, text
        assert redact_text(text) == text


def test_redacted_stream_bounds_hashes_and_decodes() -> None:
    stream = RedactedStream(("s3cr3t-v4lue",), tail_bytes=64)
    raw = b"abc s3cr3t-v4lue " * 1000 + b"\xff\xfe end"
    for i in range(0, len(raw), 777):
        stream.write(raw[i : i + 777])
    tail = stream.close()
    assert stream.count == len(raw)
    assert stream.raw.hexdigest() == hashlib.sha256(raw).hexdigest()
    assert len(tail.encode()) <= 64 and tail.endswith("abc *** \ufffd\ufffd end")
    assert "s3cr3t" not in tail
