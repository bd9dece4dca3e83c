"""ASCII armour and OpenPGP packet framing, read in Python.

gpg is handed exactly the bytes checked here (one detached signature packet), and a signature can be
named by its issuer even when no policy key matches.
"""

from __future__ import annotations

import base64
import binascii

PGP_SIGNATURE = "PGP SIGNATURE"


def dearmor(text: str, label: str) -> bytes | None:
    lines = [line.strip() for line in text.strip().splitlines()]
    if lines[:1] != [f"-----BEGIN {label}-----"] or lines[-1:] != [f"-----END {label}-----"]:
        return None
    body = lines[1:-1]
    if label == PGP_SIGNATURE:
        body = body[body.index("") + 1 :] if "" in body else body  # headers end at a blank line
        body = body[:-1] if body and body[-1].startswith("=") else body  # the CRC-24 line
    return b64("".join(body))


def armor(blob: bytes, label: str) -> str:
    data = base64.b64encode(blob).decode()
    lines = [data[i : i + 70] for i in range(0, len(data), 70)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----", ""])


def b64(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True) or None
    except (binascii.Error, ValueError):
        return None


def pgp_packets(data: bytes) -> list[tuple[int, bytes]]:
    """(tag, body) of each OpenPGP packet (RFC 4880 4.2); [] when not well-formed."""
    out, pos = [], 0
    try:
        while pos < len(data):
            head = data[pos]
            if not head & 0x80:
                return []
            if head & 0x40:  # new-format length
                tag, first = head & 0x3F, data[pos + 1]
                if first < 192:
                    length, pos = first, pos + 2
                elif first < 224:
                    length, pos = ((first - 192) << 8) + data[pos + 2] + 192, pos + 3
                elif first == 255:
                    length, pos = int.from_bytes(data[pos + 2 : pos + 6], "big"), pos + 6
                else:
                    return []  # partial lengths never occur in a detached signature
            else:
                tag, size = (head >> 2) & 0x0F, (1, 2, 4, 0)[head & 3]
                length = int.from_bytes(data[pos + 1 : pos + 1 + size], "big")
                length = length if size else len(data) - pos - 1
                pos += 1 + size
            if pos + length > len(data):
                return []
            out.append((tag, data[pos : pos + length]))
            pos += length
    except IndexError:
        return []
    return out


def pgp_issuer(body: bytes) -> str:
    """The issuer fingerprint (or else key id) a signature packet names; "" if none."""
    if body[:1] == b"\x03":
        return body[7:15].hex().upper() if len(body) >= 15 else ""
    if body[:1] != b"\x04":
        return ""
    hashed_end = 6 + int.from_bytes(body[4:6], "big")
    unhashed = int.from_bytes(body[hashed_end : hashed_end + 2], "big")
    area = body[6:hashed_end] + body[hashed_end + 2 : hashed_end + 2 + unhashed]
    key_id, pos = "", 0
    try:
        while pos < len(area):
            first = area[pos]
            if first < 192:
                length, pos = first, pos + 1
            elif first < 255:
                length, pos = ((first - 192) << 8) + area[pos + 1] + 192, pos + 2
            else:
                length, pos = int.from_bytes(area[pos + 1 : pos + 5], "big"), pos + 5
            kind, data = area[pos] & 0x7F, area[pos + 1 : pos + length]
            if kind == 33 and len(data) == 21:  # issuer fingerprint: version + v4 fingerprint
                return data[1:].hex().upper()
            if kind == 16 and len(data) == 8:  # issuer key id
                key_id = data.hex().upper()
            pos += length
    except IndexError:
        pass
    return key_id
