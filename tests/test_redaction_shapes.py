"""The token shapes the redactor knows beyond GitHub's and AWS's (issue 22), their near misses,
a JWT longer than the streaming window, and `describe`, which names a value's shape for an
error message without quoting it."""

from __future__ import annotations

import pytest

from mergegate.redaction import (
    JWT_MAX,
    PATTERN_WINDOW,
    Redactor,
    describe,
    find_credential,
    redact_text,
)

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
# A JWT far longer than the window, as an OIDC token with many claims is.
LONG_JWT = (
    "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEyMyJ9"
    + ".eyJjbGFpbSI6"
    + "QUJD" * 700
    + ".signature_"
    + "Zx9-" * 80
)

# (name find_credential reports, the token, as a person would paste it)
TOKENS = [
    ("GitLab token", "glpat-xY3kq9Zb2LmN8pQr4sTu"),
    ("GitLab token", "glpat-AbCdEfGhIjKlMnOpQrStUvWxYz0.01.0w1abc2de"),
    ("Google API key", "AIzaSy" + "A1b2C3d4E5" * 3 + "x_-"),
    ("npm token", "npm_" + "a1B2c3D4e5" * 3 + "F6g7H8"),
    ("PyPI token", "pypi-AgEIcHlwaS5vcmcCJDYw" + "abcdEFGH12" * 6),
    ("Stripe secret key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("Stripe secret key", "rk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("Stripe secret key", "sk_test_4eC39HqLyjWDarjtT1zdp7dc"),
    ("Hugging Face token", "hf_" + "AbCdEfGhIj" * 3 + "KlMn"),
    ("JSON Web Token", JWT),
    ("Slack token", "xoxp-1234567890-abcdefghij"),
    ("Slack token", "xoxo-1234567890-abcdefghij"),
    ("Slack token", "xoxr-1234567890-abcdefghij"),
]

NEAR_MISSES = [
    "glpat-tooshort",
    "glpat-" + "x" * 19,
    "AIza" + "b" * 34,  # one short
    "aizaSy" + "A1b2C3d4E5" * 3 + "x_-",  # the prefix is case-sensitive
    "npm_" + "a" * 35,
    "npm_config_cache=/tmp/npm",
    "pip install pypi-simple-index-mirror",
    "pypi-Ab" + "c" * 60,  # not a macaroon
    "sk_live_short",
    "desk_live_4eC39HqLyjWDarjtT1zdp7dc",  # inside a word
    "hf_" + "a" * 33,
    "shelf_" + "A" * 40,
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0",  # two parts: no signature
    "eyJhbGciOiJIUzI1NiJ9.e30.abc",  # a signature too short to be one
    "myeyJhbGciOiJIUzI1NiJ9.e30.SflKxwRJSMeKKF2QT4fw",  # inside a word
    "abJhbGciOiJIUzI1NiJ9.e30.SflKxwRJSMeKKF2QT4fwpMeJf",
    "xoxz-1234567890-abcdefghij",
    "xoxb-short",
    "version 1.2.3.4567890123456789",
]


def _stream(redactor: Redactor, chunks: list[bytes]) -> bytes:
    return b"".join(redactor.feed(chunk) for chunk in chunks) + redactor.flush()


@pytest.mark.parametrize(("name", "token"), TOKENS)
def test_token_shapes_are_masked_and_named(name: str, token: str) -> None:
    text = f"deploying with {token} now"

    assert redact_text(text) == "deploying with *** now"
    assert find_credential(text) == name
    data = f"{text}\n".encode()
    for cut in range(0, len(data) + 1, 5):
        assert _stream(Redactor(), [data[:cut], data[cut:]]) == b"deploying with *** now\n", cut


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_left_alone(text: str) -> None:
    assert find_credential(text) is None
    assert redact_text(text) == text


def test_a_jwt_longer_than_the_window_is_masked_whole_however_it_arrives() -> None:
    assert len(LONG_JWT) > 4 * PATTERN_WINDOW
    data = f"token follows {LONG_JWT} end\n".encode()
    for size in (1, 7, 100, 511, 512, 513, 4096):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        assert _stream(Redactor(), chunks) == b"token follows *** end\n", size


def test_a_run_that_only_looks_like_a_jwt_start_is_not_held_for_ever() -> None:
    # Held back while it may be a JWT, up to JWT_MAX; after that, output flows again.
    redactor = Redactor()
    run = b"eyJ" + b"a" * (2 * JWT_MAX)
    emitted = b"".join(redactor.feed(run[i : i + 1000]) for i in range(0, len(run), 1000))
    assert len(emitted) >= len(run) - JWT_MAX - redactor.window
    assert emitted + redactor.flush() == run


def test_output_that_is_no_jwt_is_not_held_back_more_than_before() -> None:
    redactor = Redactor()
    chunk = b"eyJ is here. and here.eyJ.\n" * 100
    emitted = sum(len(redactor.feed(chunk)) for _ in range(20))
    assert 20 * len(chunk) - emitted == redactor.window == PATTERN_WINDOW


# --- describe: the shape of a value, never the value ---------------------------------------


@pytest.mark.parametrize(
    ("value", "shape"),
    [
        ("ghp_" + "A1b2C3d4E5" * 4, "str (looks like a GitHub token)"),
        (f"Bearer-less {JWT}", "str (looks like a JSON Web Token)"),
        ("AKIAIOSFODNN7EXAMPLE", "str (looks like an AWS access key id)"),
        ("npm_" + "a1B2c3D4e5" * 4, "str (looks like an npm token)"),
        ("https://me:pa55w0rd@example.com", "str (looks like a URL with a password)"),
        ("-----BEGIN PRIVATE KEY-----\nMIIE\n", "str (looks like a private key)"),
        (b"hf_" + b"AbCdEfGhIj" * 4, "bytes (looks like a Hugging Face token)"),
        ("hello", "str of 5 characters"),
        ("é", "str of 1 character"),
        ("", "empty str"),
        (b"xy", "bytes of 2 bytes"),
        (True, "bool"),
        (3, "int"),
        (2.5, "float"),
        (None, "null"),
        ([1, 2], "list of 2 items"),
        ((1,), "list of 1 item"),
        ({"a": 1}, "mapping of 1 key"),
        ({}, "mapping of 0 keys"),
    ],
)
def test_describe_names_the_shape(value: object, shape: str) -> None:
    assert describe(value) == shape


@pytest.mark.parametrize(("name", "token"), TOKENS)
def test_describe_never_quotes_a_secret(name: str, token: str) -> None:
    shown = describe(token)

    assert token not in shown and token[:12] not in shown
    assert shown.startswith("str (looks like ") and shown.endswith(f" {name})")
