"""The audit log as files: rotation, reading the tail back, the chain across files."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mergegate.audit import fast_read
from mergegate.audit import log as audit
from mergegate.audit.records import GENESIS, Record
from mergegate.errors import IntegrityError
from mergegate.git.repo import Repo


def _repo(tmp_path: Path) -> Repo:
    path = tmp_path / "gate"
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    # As the audit branch: its tree holds audit/ and nothing else (here, at first, nothing at all).
    subprocess.run(
        [
            "git",
            "-C",
            str(path),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@x",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "root",
        ],
        check=True,
    )
    return Repo(path)


def _append(repo: Repo, tip: str, drafts: list[dict[str, object]]) -> str:
    tail = audit.read_tail(repo, tip)
    records = audit.seal(drafts, after_seq=tail.last_seq, after_hash=tail.last_hash)
    files = audit.append(repo, tip, tail, records)
    return repo.write_commit(
        parent=tip, files=files, message="audit\n", author=("t", "t@x"), signing=None
    )


def test_rotation_keeps_one_chain_across_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit, "RECORDS_PER_FILE", 3)
    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    assert tip is not None
    for batch in range(4):
        drafts = [
            audit.draft("rejected", runner="r", path=f"jobs/{batch}-{i}.yaml", reason="x")
            for i in range(2)
        ]
        tip = _append(repo, tip, drafts)
    tip = _append(repo, tip, [audit.draft("scanned", runner="r", commit=tip)])
    names = [p for p, _ in audit.log_files(repo, tip)]
    assert names == [f"audit/log-{n:06d}.jsonl" for n in range(1, 4)]
    records = audit.read_all(repo, tip)
    assert [r.seq for r in records] == list(range(1, 10))
    tail = audit.read_tail(repo, tip)
    assert tail.last_seq == 9 and tail.scanned is not None and tail.scanned.seq == 9
    assert tail.since_scanned == ()


def test_tail_reads_back_past_a_fresh_file_to_the_last_scanned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit, "RECORDS_PER_FILE", 2)
    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    assert tip is not None
    tip = _append(repo, tip, [audit.draft("scanned", runner="r", commit=tip)])
    tip = _append(
        repo, tip, [audit.draft("rejected", runner="r", path=f"jobs/{i}.yaml") for i in range(3)]
    )
    tail = audit.read_tail(repo, tip)
    assert tail.scanned is not None and tail.scanned.seq == 1
    assert [r.seq for r in tail.since_scanned] == [2, 3, 4]


def test_hash_is_the_documented_one(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    assert tip is not None
    tip = _append(repo, tip, [audit.draft("scanned", runner="r", commit=tip)])
    line = (repo.read_file(tip, "audit/log-000001.jsonl") or b"").decode()
    record = json.loads(line)
    body = {k: v for k, v in record.items() if k != "hash"}
    import hashlib

    expected = hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    ).hexdigest()
    assert record["hash"] == expected
    assert record["prev"] == "0" * 64 and record["seq"] == 1


def test_a_gap_in_file_numbers_is_tampering(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    assert tip is not None
    tip = repo.write_commit(
        parent=tip,
        files={"audit/log-000002.jsonl": b"{}\n"},
        message="x\n",
        author=("t", "t@x"),
        signing=None,
    )
    with pytest.raises(IntegrityError, match="not numbered"):
        audit.log_files(repo, tip)


def test_a_file_beside_audit_is_tampering(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    tip = _append(repo, repo.rev("HEAD"), [audit.draft("scanned", runner="r")])
    tip = repo.write_commit(
        parent=tip, files={"README": b"x\n"}, message="x\n", author=("t", "t@x"), signing=None
    )
    with pytest.raises(IntegrityError, match="unexpected file README on the audit branch"):
        audit.read_tail(repo, tip)


def test_the_unapproved_map_is_kept_by_reference_and_checked_on_reading(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    files = {f"vendor/{i}.txt": "c" * 40 for i in range(2000)}
    count, digest, held = audit.unapproved_ref(files)
    assert held is not None and (count, digest) == (2000, held.sha256)
    assert audit.unapproved_ref(dict(reversed(files.items())))[2] == held  # one map, one file
    fields = {"unapproved_count": count, "unapproved_file": digest}
    tip = _append(repo, repo.rev("HEAD"), [audit.draft("scanned", runner="r", **fields)])
    tip = repo.write_commit(
        parent=tip, files={held.path: held.data}, message="x\n", author=("t", "t@x"), signing=None
    )
    tail = audit.read_tail(repo, tip)
    assert tail.scanned is not None and len(tail.scanned.line()) < 4096
    assert audit.read_unapproved(repo, tip, tail.scanned) == files
    edited = repo.write_commit(
        parent=tip,
        files={held.path: held.data.replace(b"vendor/1.txt", b"vendor/X.txt")},
        message="x\n",
        author=("t", "t@x"),
        signing=None,
    )
    with pytest.raises(IntegrityError, match="does not hash to its name"):
        audit.read_unapproved(repo, edited, tail.scanned)
    with pytest.raises(IntegrityError, match="which is not on the audit branch"):
        audit.read_unapproved(repo, repo.rev("HEAD"), tail.scanned)


def test_the_whole_log_is_streamed_one_file_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """audit verify never holds the whole log: records come file by file, each file's links checked
    first."""
    monkeypatch.setattr(audit, "RECORDS_PER_FILE", 2)
    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    assert tip is not None
    tip = _append(
        repo, tip, [audit.draft("rejected", runner="r", path=f"jobs/{i}.yaml") for i in range(5)]
    )
    # Edit the record in the last file (seq 5): its hash no longer matches.
    path, blob = audit.log_files(repo, tip)[-1]
    edited = repo.blob(blob).replace(b'"jobs/4.yaml"', b'"jobs/9.yaml"')
    tip = repo.write_commit(
        parent=tip, files={path: edited}, message="edit\n", author=("t", "t@x"), signing=None
    )
    blobs_read: list[int] = []
    reads = repo.blobs

    def counted(
        shas: list[str],
    ) -> Iterator[bytes]:  # the files handed over so far (git reads one ahead)
        for data in reads(shas):
            blobs_read.append(len(data))
            yield data

    monkeypatch.setattr(repo, "blobs", counted)

    stream = audit.iter_all(repo, tip)
    first = [next(stream), next(stream)]

    assert [r.seq for r in first] == [1, 2] and len(blobs_read) == 1  # only log-000001 read so far
    assert [r.seq for r in (next(stream), next(stream))] == [3, 4]
    with pytest.raises(IntegrityError, match="seq 5: hash does not match") as caught:
        next(stream)
    assert caught.value.file == "audit/log-000003.jsonl" and caught.value.line == 1
    with pytest.raises(IntegrityError, match="seq 5: hash does not match"):
        audit.read_all(repo, tip)


def test_a_pass_checks_the_audit_commits_since_the_one_that_added_the_last_scanned(
    tmp_path: Path,
) -> None:
    """In a fresh clone: few commits, whatever the history's length (audit verify checks them
    all)."""
    from mergegate.facts.audit_commits import unchecked

    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    old = []
    for n in range(5):  # five complete passes: a claim, then its result and `scanned`
        tip = _append(repo, tip, [audit.draft("started", runner="r", path=f"jobs/{n}.yaml")])
        tip = _append(
            repo,
            tip,
            [
                audit.draft("finished", runner="r", path=f"jobs/{n}.yaml"),
                audit.draft("scanned", runner="r"),
            ],
        )
        old.append(tip)
    claim = _append(
        repo, tip, [audit.draft("started", runner="r", path="jobs/x.yaml")]
    )  # a pass that stopped midway
    assert unchecked(repo, claim, seen=None, tail=audit.read_tail(repo, claim)) == [old[-1], claim]
    assert unchecked(repo, old[-1], seen=None, tail=audit.read_tail(repo, old[-1])) == [old[-1]]
    assert unchecked(repo, claim, seen=old[-2], tail=audit.read_tail(repo, claim)) == [
        repo.commit(old[-1]).parents[0],
        old[-1],
        claim,
    ]
    assert unchecked(repo, claim, seen=claim, tail=audit.read_tail(repo, claim)) == []


def _slow(data: bytes, prev_seq: int, prev_hash: str) -> list[Record] | str:
    """The reference reading of one file (parse_file + check_links): its records, or its error."""
    try:
        records = audit.parse_file(data, "f")
        audit.check_links(records, prev_seq=prev_seq, prev_hash=prev_hash, where={})
    except IntegrityError as exc:
        return str(exc)
    return records


def _canonical_file() -> bytes:
    drafts: list[dict[str, object]] = [
        audit.draft(
            "started",
            runner="r",
            job="j",
            path="jobs/j.yaml",
            blob="b" * 40,
            commit="c" * 40,
            run_id="1",
            approvers=["bob", "carol"],
            attempt=1,
        ),
        audit.draft(
            "finished",
            runner="r",
            job="j",
            path="jobs/j.yaml",
            blob="b" * 40,
            commit="c" * 40,
            run_id="1",
            status="succeeded",
            stdout_tail='a "quoted" tab\t, nul \x00, é, \u2028 and \\',
            exit_code=0,
            duration_ms=3,
            signal=None,
            nested={"k": [1, None, True]},
            ratio=0.25,
        ),
        audit.draft(
            "scanned",
            runner="r",
            commit="c" * 40,
            start=None,
            unapproved_count=0,
            unapproved_file=None,
        ),
    ]
    return b"".join(r.line() for r in audit.seal(drafts, after_seq=4, after_hash="e" * 64))


def _resealed(lines: list[bytes], transform: object) -> bytes:
    """Each line's value re-hashed correctly, then written by `transform` (value -> bytes, without
    newline)."""
    out = []
    for line in lines:
        value = json.loads(line)
        value["hash"] = audit.record_hash(value)
        out.append(transform(value) + b"\n")  # type: ignore[operator]
    return b"".join(out)


def test_the_fast_reading_of_a_log_file_accepts_only_what_the_reference_reading_accepts() -> None:
    """`_checked_fast` (audit verify's path for canonical files) against parse_file + check_links
    over a corpus: the canonical file, every single-byte change of it, and files written in other
    JSON spellings whose hashes are right for their content (the reference accepts those: the fast
    path must hand them over rather than refuse them)."""
    good = _canonical_file()
    lines = good.splitlines()
    corpus = [good]
    for i in range(
        len(good)
    ):  # every byte flipped to a few neighbours: edits, broken JSON, bad UTF-8
        for b in {good[i] ^ 1, good[i] ^ 0x20, 0x22, 0x5C, 0x0A, 0xFF}:
            corpus.append(good[:i] + bytes([b]) + good[i + 1 :])
    spellings = [
        lambda v: json.dumps(v, sort_keys=True).encode(),  # spaces after separators
        lambda v: json.dumps(v, sort_keys=True, separators=(",", ":")).encode(),  # ASCII escapes
        lambda v: json.dumps(
            dict(reversed(list(v.items()))), separators=(",", ":"), ensure_ascii=False
        ).encode(),  # order
        lambda v: (
            b" "
            + json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
            + b" "
        ),
        lambda v: (
            json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            .encode()
            .replace(b'"seq":', b'"seq":0,"seq":')
        ),
        lambda v: (
            json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            .encode()
            .replace(b"0.25", b"2.5e-1")
        ),
        lambda v: (
            json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            .encode()
            .replace(b"\\t", b"\\u0009")
        ),
        lambda v: (
            b"\xef\xbb\xbf"
            + json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        ),
    ]
    others = [_resealed(lines, spelling) for spelling in spellings]
    corpus += [
        *others,
        good.replace(b"\n", b"\r\n"),
        good[:-1],
        b"",
        good + b"\n",
        good.replace(b'"seq":5', b'"seq":true'),
    ]
    for data in corpus:
        reference = _slow(data, 4, "e" * 64)
        fast = fast_read.checked_fast(data, prev_seq=4, prev_hash="e" * 64)
        if fast is not None:
            assert data == good, (
                data
            )  # no edit of the canonical file gets through, whatever the reference says
            assert not isinstance(reference, str)
            assert [r.as_json() for r in fast] == [r.as_json() for r in reference]
    assert fast_read.checked_fast(good, prev_seq=4, prev_hash="e" * 64) is not None
    assert (
        fast_read.checked_fast(good, prev_seq=5, prev_hash="e" * 64) is None
    )  # the link to the file before
    assert fast_read.checked_fast(good, prev_seq=4, prev_hash="f" * 64) is None
    # Other spellings with right hashes (the BOM and duplicate-key ones aside) the reference
    # accepts:
    # the fast path hands them over, and iter_all reads them the reference way.
    accepted = [data for data in others if not isinstance(_slow(data, 4, "e" * 64), str)]
    assert len(accepted) >= 5 and all(
        fast_read.checked_fast(data, prev_seq=4, prev_hash="e" * 64) is None for data in accepted
    )


def _own_hashed(values: list[dict[str, object]], write: object) -> bytes:
    """Lines written by `write` (value -> bytes, keys sorted) whose hash is that of their own body
    bytes:
    what a forger would write. The reference (which re-encodes canonically) refuses any of them that
    is not canonical; so must the fast path."""
    import hashlib

    out = []
    for value in values:
        body = {k: v for k, v in value.items() if k != "hash"}
        out.append(write({**body, "hash": hashlib.sha256(write(body)).hexdigest()}) + b"\n")  # type: ignore[operator]
    return b"".join(out)


def test_the_orjson_reading_accepts_only_canonical_lines_as_json_reads_them() -> None:
    """The orjson stage of `_checked_fast` (and the json stage after it) return values only for a
    file whose every line is json.dumps-canonical, and then exactly json.loads' values: over the
    corpus of the test above plus lines orjson writes unlike json.dumps (small and huge floats, big
    integers), hashed over their own bytes so that only the canonical test stands between them and
    acceptance."""
    orjson = pytest.importorskip("orjson")
    good = _canonical_file()
    assert (
        fast_read._canonical_values_orjson(good, good.split(b"\n")[:-1]) is not None
    )  # the stage is reached

    def sorted_orjson(
        value: object,
    ) -> bytes:  # json's spelling for what orjson cannot write (integers past 64 bits)
        try:
            return bytes(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
        except TypeError:
            return json.dumps(
                value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
            ).encode()

    base = [json.loads(line) for line in good.splitlines()]
    traps = [
        1.5e-05,
        1e-07,
        0.0001,
        1e16,
        1.5e300,
        5.0,
        -0.0,
        0.25,
        10**30,
        -(2**63),
        2**64 - 1,
        "\u2028\x7f\x1f",
    ]
    corpus = []
    for trap in traps:
        values = [{**v, "trap": trap} for v in base]
        corpus += [
            _own_hashed(values, sorted_orjson),
            _resealed(good.splitlines(), lambda v, t=trap: sorted_orjson({**v, "trap": t})),
        ]
    for i in range(
        0, len(good), 7
    ):  # single-byte edits, as above (a sample: the test above has them all)
        corpus.append(good[:i] + bytes([good[i] ^ 0x20]) + good[i + 1 :])
    reached = 0
    for data in corpus:
        lines = data.split(b"\n")[:-1]
        for stage in (fast_read._canonical_values_orjson, fast_read._canonical_values_json):
            values = stage(data, lines)
            if values is None:
                continue
            reached += stage is fast_read._canonical_values_orjson
            expected = [json.loads(line) for line in lines]
            assert values == expected and [type(v) for v in _leaves(values)] == [
                type(v) for v in _leaves(expected)
            ]
            assert all(
                json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
                == line
                for v, line in zip(expected, lines, strict=True)
            ), data
        fast = fast_read.checked_fast(data, prev_seq=4, prev_hash="e" * 64)
        reference = _slow(data, 4, "e" * 64)
        if fast is not None:
            assert not isinstance(reference, str) and [r.as_json() for r in fast] == [
                r.as_json() for r in reference
            ]
    assert reached >= 8  # the canonical traps (5.0, 0.25, integers, the string) go through orjson
    # The forged small float in orjson's spelling: orjson alone would take it; the screen hands it
    # to json, which refuses.
    forged = _own_hashed([{**v, "trap": 1.5e-05} for v in base], sorted_orjson)
    assert b"0.000015" in forged and isinstance(_slow(forged, 4, "e" * 64), str)
    assert fast_read.checked_fast(forged, prev_seq=4, prev_hash="e" * 64) is None


def _leaves(value: object) -> list[object]:
    if isinstance(value, dict):
        return [leaf for k in sorted(value) for leaf in (k, *_leaves(value[k]))]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def test_orjson_writes_what_json_dumps_writes_where_the_fast_path_relies_on_it() -> None:
    """What `_canonical_values_orjson` assumes of orjson, checked against the installed version:
    every code point escaped alike (one string holding all of them), keys sorted by code point,
    and every float spelled as repr() unless its spelling holds one of the screened forms."""
    import random
    import struct

    orjson = pytest.importorskip("orjson")
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    assert orjson.dumps(every) == json.dumps(every, ensure_ascii=False).encode()
    assert orjson.loads(json.dumps(every, ensure_ascii=False).encode()) == every
    keys = {
        chr(c): 0
        for c in (0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000, 0x10FFFF, 0x61, 0x41, 0x20, 0xE9)
    }
    assert (
        orjson.dumps(keys, option=orjson.OPT_SORT_KEYS)
        == json.dumps(keys, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    )
    rng = random.Random(12)
    floats = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(20000)]
    floats += [m * 10.0**e for e in range(-20, 22) for m in (1.0, 1.5, 9.999999, 123456.789, -2.5)]
    floats += [rng.uniform(-1e6, 1e6) for _ in range(5000)] + [
        round(rng.uniform(-1e4, 1e4), rng.randint(0, 9)) for _ in range(5000)
    ]
    checked = 0
    for x in floats:
        if x != x or x in (float("inf"), float("-inf")):
            continue
        spelled = orjson.dumps(x)
        assert b"E" not in spelled
        if not fast_read._holds_float_forms(spelled):
            assert spelled == repr(x).encode(), x
            checked += 1
    assert checked > 10000


def test_the_float_screen_passes_text_and_catches_every_float_form() -> None:
    """`_holds_float_forms` sends a file to json's reading for any float orjson may spell unlike
    repr() (the test above holds orjson to that), but not for text that merely holds `e-`
    (`one-time`)."""
    for spelled in (b"1e-7", b"-1.5e-07", b"1e+16", b"2.5E+300".lower(), b"0.000015", b"-0.00001"):
        assert fast_read._holds_float_forms(
            b'{"x":' + spelled + b"}"
        ) and fast_read._holds_float_forms(spelled), spelled
    for text in (
        b'{"rule":"one-time","a":"make-release e+ c++","t":0.001,"n":1e3}',
        b"e-",
        b"",
        b"0.000",
    ):
        assert not fast_read._holds_float_forms(text), text
    # A canonical file whose text holds `e-` goes through orjson; a forged 1e-07 next to that text
    # does not.
    good = _canonical_file().replace(b"jobs/j.yaml", b"jobs/one-time.yaml")
    good = _resealed(
        good.splitlines(),
        lambda v: json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(),
    )
    assert (
        b"e-" in good
        and fast_read._canonical_values_orjson(good, good.split(b"\n")[:-1]) is not None
    )
    orjson = pytest.importorskip("orjson")
    forged = _own_hashed(
        [{**json.loads(line), "trap": 1e-07} for line in good.splitlines()],
        lambda v: bytes(orjson.dumps(v, option=orjson.OPT_SORT_KEYS)),
    )
    assert b'"trap":1e-7' in forged and isinstance(_slow(forged, 4, "e" * 64), str)
    assert fast_read.checked_fast(forged, prev_seq=4, prev_hash="e" * 64) is None


# -- audit verify on every core (audit_chain) ----------------------------------------


def _many_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: int = 11
) -> tuple[Repo, str]:
    """A log of `files` files of 2 records (a `finished` with a run id in each), in one commit."""
    monkeypatch.setattr(audit, "RECORDS_PER_FILE", 2)
    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    assert tip is not None
    drafts: list[dict[str, object]] = []
    for i in range(files):
        drafts += [
            audit.draft("started", runner="r", path=f"jobs/{i}.yaml", run_id=f"run-{i}"),
            audit.draft(
                "finished",
                runner="r",
                path=f"jobs/{i}.yaml",
                run_id=f"run-{i}",
                exit_code=0,
                ratio=0.5,
            ),
        ]
    return repo, _append(repo, tip, drafts)


def _replaced(repo: Repo, tip: str, number: int, data: bytes) -> str:
    path = f"audit/log-{number:06d}.jsonl"
    return repo.write_commit(
        parent=tip, files={path: data}, message="tamper\n", author=("t", "t@x"), signing=None
    )


def _resealed_file(repo: Repo, tip: str, number: int, *, after_seq: int, after_hash: str) -> bytes:
    """Log file `number`'s records sealed again after (after_seq, after_hash): right in itself,
    wrong as a link."""
    data = repo.read_file(tip, f"audit/log-{number:06d}.jsonl")
    assert data is not None
    drafts = [
        {k: v for k, v in json.loads(line).items() if k not in ("seq", "prev", "hash")}
        for line in data.splitlines()
    ]
    return b"".join(
        r.line() for r in audit.seal(drafts, after_seq=after_seq, after_hash=after_hash)
    )


def _outcome(
    repo: Repo, tip: str, workers: int
) -> list[tuple[str, str, int, int | None, object]] | tuple[str, str, str | None, int | None]:
    """What each file yields (and what audit verify keeps of the chain), or the error, with
    `workers` workers."""
    from mergegate.audit import chain as audit_chain
    from mergegate.operations import audit_verify as audit_check

    try:
        with audit_chain.ChainCheck(repo, tip, audit_check._facts, workers=workers) as reading:
            kept = audit_check.read_chain(reading)
        return [
            (c.path, c.blob, c.records, c.first_seq, c.summary)
            for c in audit_chain.check_chain(repo, tip, audit_check._facts, workers=workers)
        ] + [
            (
                "kept",
                str(kept.verified),
                kept.records,
                kept.files,
                [r.as_json() for r in kept.naming],
            )
        ]
    except Exception as exc:  # (compared across worker counts, whatever it is)
        return type(exc).__name__, str(exc), getattr(exc, "file", None), getattr(exc, "line", None)


def test_the_chain_checked_in_workers_is_the_chain_checked_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check_chain in 2 or 3 forked workers yields what the serial reading yields (files, counts,
    first seqs, the facts audit verify keeps), and proves canonical files in the workers (the
    reference reading, here, is never needed for them)."""
    repo, tip = _many_files(tmp_path, monkeypatch)
    serial = _outcome(repo, tip, 1)
    assert (
        isinstance(serial, list)
        and len(serial) == 12
        and [c[3] for c in serial[:-1]] == list(range(1, 23, 2))
    )
    assert serial[4][4].finished == [("run-4", 10)]  # type: ignore[attr-defined]

    def no_reference(data: bytes, path: str) -> list[Record]:
        raise AssertionError(f"{path} was read the reference way")

    monkeypatch.setattr(audit, "parse_file", no_reference)
    assert _outcome(repo, tip, 2) == serial and _outcome(repo, tip, 3) == serial


@pytest.mark.parametrize(
    "number", [5, 6]
)  # a file of either worker's share (2 workers), linked to the other's
@pytest.mark.parametrize("tamper", ["prev", "seq", "edit", "two finished"])
def test_a_bad_link_or_record_in_a_worker_s_file_is_named_as_the_serial_reading_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, number: int, tamper: str
) -> None:
    """Files checked by different workers: a file right in itself but not linked to the one before
    (its prev or its seq), an edited record, and a run finished twice across files are the same
    error, file and line, with 1, 2 or 3 workers."""
    repo, tip = _many_files(tmp_path, monkeypatch)
    before = audit.read_all(repo, tip)[2 * (number - 1) - 1]  # the last record of the file before
    data = repo.read_file(tip, f"audit/log-{number:06d}.jsonl")
    assert data is not None
    if tamper == "prev":
        data = _resealed_file(repo, tip, number, after_seq=before.seq, after_hash="f" * 64)
    elif tamper == "seq":
        data = _resealed_file(repo, tip, number, after_seq=before.seq + 1, after_hash=before.hash)
    elif tamper == "edit":
        data = data.replace(b'"exit_code":0', b'"exit_code":1')
    if tamper != "two finished":
        bad = _replaced(repo, tip, number, data)
    # the file's `finished` record takes the run id of the file before's, in a log sealed again
    else:
        drafts = [
            {k: v for k, v in r.as_json().items() if k not in ("seq", "prev", "hash")}
            for r in audit.read_all(repo, tip)
        ]
        drafts[2 * number - 1]["run_id"] = f"run-{number - 2}"
        sealed = audit.seal(drafts, after_seq=0, after_hash=GENESIS)
        files = audit.append(repo, None, audit.read_tail(repo, None), sealed)
        bad = repo.write_commit(
            parent=tip, files=files, message="tamper\n", author=("t", "t@x"), signing=None
        )
    serial = _outcome(repo, bad, 1)
    assert isinstance(serial, tuple), serial
    expected = {
        "prev": (
            "IntegrityError",
            f"seq {2 * number - 1}: prev does not match",
            f"audit/log-{number:06d}.jsonl",
            1,
        ),
        "seq": (
            "IntegrityError",
            f"seq {2 * number}: expected seq {2 * number - 1}",
            f"audit/log-{number:06d}.jsonl",
            1,
        ),
        "edit": (
            "IntegrityError",
            f"seq {2 * number}: hash does not match",
            f"audit/log-{number:06d}.jsonl",
            2,
        ),
        "two finished": (
            "IntegrityError",
            f"seq {2 * number}: run run-{number - 2} has 2 finished records",
            None,
            None,
        ),
    }[tamper]
    assert (serial[0], serial[2], serial[3]) == (
        expected[0],
        expected[2],
        expected[3],
    ) and expected[1] in serial[1], serial
    assert _outcome(repo, bad, 2) == serial and _outcome(repo, bad, 3) == serial


@pytest.mark.parametrize("how", ["killed", "raises", "exits"])
def test_a_worker_that_dies_or_fails_fails_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A worker killed by a signal, raising, or exiting without answering for its files: never a
    pass, but an IntegrityError naming the first file not verified; no worker is left running."""
    import os
    import signal

    from mergegate.audit import chain as audit_chain
    from mergegate.operations import audit_verify as audit_check

    repo, tip = _many_files(tmp_path, monkeypatch)
    proven = fast_read._proven

    def failing(data: bytes) -> object:
        if b'"jobs/6.yaml"' in data:  # log-000007, the first file of worker 0 that it cannot finish
            if how == "killed":
                os.kill(os.getpid(), signal.SIGKILL)
            if how == "raises":
                raise RuntimeError("boom")
            os._exit(0)
        return proven(data)

    monkeypatch.setattr(fast_read, "_proven", failing)
    forked: list[int] = []
    fork = os.fork

    def counted() -> (
        int
    ):  # the workers' process ids, to see that none is left running (nor unreaped)
        pid = fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", counted)
    checked: list[str] = []
    with pytest.raises(IntegrityError) as caught:
        for log in audit_chain.check_chain(repo, tip, audit_check._facts, workers=2):
            checked.append(log.path)
    assert checked == [f"audit/log-{n:06d}.jsonl" for n in range(1, 7)]
    assert caught.value.file == "audit/log-000007.jsonl" and caught.value.exit_code == 3
    words = {
        "killed": "was killed by signal 9",
        "raises": "failed (RuntimeError: boom)",
        "exits": "stopped answering",
    }[how]
    assert (
        "audit/log-000007.jsonl and the files after it were not verified: the process checking "
        f"them {words}" in str(caught.value)
    )
    assert len(forked) == 2
    for pid in forked:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_a_missing_log_blob_is_the_same_git_error_in_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from mergegate.errors import GitError

    repo, tip = _many_files(tmp_path, monkeypatch)
    blob = dict(audit.log_files(repo, tip))["audit/log-000004.jsonl"]
    loose = tmp_path / "gate/.git/objects" / blob[:2] / blob[2:]
    assert loose.exists()
    shutil.move(loose, tmp_path / "moved")
    serial = _outcome(repo, tip, 1)
    assert (
        isinstance(serial, tuple) and serial[0] == GitError.__name__ and blob[:12] in serial[1]
    ), serial
    assert _outcome(repo, tip, 2) == serial


def test_a_chain_check_closed_before_it_is_read_leaves_no_worker_and_raises_only_when_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """audit verify starts the workers before its other checks (a rewritten branch, the trust root):
    when one of those fails, closing the check ends its workers; an audit tree with a stray says so
    only when read."""
    import os

    from mergegate.audit import chain as audit_chain
    from mergegate.operations import audit_verify as audit_check

    repo, tip = _many_files(tmp_path, monkeypatch)
    forked: list[int] = []
    fork = os.fork

    def counted() -> int:
        pid = fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", counted)
    with audit_chain.ChainCheck(repo, tip, audit_check._facts, workers=2):
        assert len(forked) == 2
    for pid in forked:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    stray = repo.write_commit(
        parent=tip,
        files={"audit/notes.txt": b"x\n"},
        message="stray\n",
        author=("t", "t@x"),
        signing=None,
    )
    reading = audit_chain.ChainCheck(repo, stray, audit_check._facts, workers=2)
    assert len(forked) == 2  # nothing to check: no worker
    with pytest.raises(IntegrityError, match=r"unexpected audit file audit/notes\.txt"):
        list(reading)


def test_the_workers_share_one_git_and_a_free_worker_takes_the_next_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One `git cat-file --batch` serves every worker (in a pack a log file is a delta of the one
    before: one git
    per worker would rebuild the others' files too), and the files go to whichever worker is free:
    while one is held up on its first file, the other checks every other file."""
    import os
    import subprocess as sp
    import time

    from mergegate.audit import chain as audit_chain

    repo, tip = _many_files(tmp_path, monkeypatch)
    proven = fast_read._proven

    def slow(data: bytes) -> object:
        if b'"jobs/0.yaml"' in data:  # log-000001
            time.sleep(1.5)
        return proven(data)

    monkeypatch.setattr(fast_read, "_proven", slow)
    started: list[list[str]] = []
    popen = sp.Popen

    def counted(args: list[str], *rest: object, **kwargs: object) -> object:
        started.append([str(a) for a in args])
        return popen(args, *rest, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(sp, "Popen", counted)
    checked = [
        (log.path, log.records, log.summary)
        for log in audit_chain.check_chain(repo, tip, lambda data, fields: os.getpid(), workers=2)
    ]
    assert [path for path, _, _ in checked] == [f"audit/log-{n:06d}.jsonl" for n in range(1, 12)]
    assert [records for _, records, _ in checked] == [2] * 11
    pids = [pid for _, _, pid in checked]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert pids[1:] == [pids[1]] * 10 and pids[0] != pids[1]  # the free worker took all the others
    assert sum(1 for args in started if args[-2:] == ["cat-file", "--batch"]) == 1


def test_a_blob_feed_answers_as_blobs_does(tmp_path: Path) -> None:
    """Repo.blob_feed, read in turn by two processes, gives each blob's bytes (one larger than a
    pipe, an empty one) as Repo.blobs does, and the same GitError for a missing object or a tree."""
    import os

    from mergegate.errors import GitError

    repo = _repo(tmp_path)
    contents = [b"", b"one\n", bytes(range(256)) * 5000, b"last"]
    shas = [repo.write_object("blob", data) for data in contents]
    tree = repo.write_tree({"a": ("100644", shas[1])})
    feed = repo.blob_feed()
    try:
        for sha in shas:
            feed.request(sha)
        assert feed.read(shas[0]) == b"" and feed.read(shas[1]) == b"one\n"
        pid = os.fork()
        if pid == 0:  # a second reader takes the next answer from the same pipe
            os._exit(0 if feed.read(shas[2]) == contents[2] else 1)
        assert os.waitpid(pid, 0)[1] == 0
        assert feed.read(shas[3]) == b"last"
    finally:
        feed.end()
    for bad, words in ((tree, "is not a blob"), ("0" * 40, "not found")):
        feed = repo.blob_feed()
        try:
            feed.request(bad)
            with pytest.raises(GitError) as caught:
                feed.read(bad)
        finally:
            feed.end()
        with pytest.raises(GitError) as expected:
            list(repo.blobs([bad]))
        assert str(caught.value) == str(expected.value) and words in str(caught.value)


def test_the_git_reading_log_files_keeps_a_small_delta_base_cache(tmp_path: Path) -> None:
    """The `cat-file --batch` that Repo.blobs and Repo.blob_feed read log files from caps git's
    cache of rebuilt delta bases (git's default, 96 MiB, only cost fresh pages: a fifth of its CPU
    and 60 MiB at 100,000 records)."""
    repo = _repo(tmp_path)
    for start in (repo._blob_batch, lambda: repo.blob_feed().proc):
        proc = start()
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(b"0" * 40 + b"\n")
            proc.stdin.flush()
            assert proc.stdout.readline().endswith(
                b" missing\n"
            )  # git answers: it is git's command line now
            argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        finally:
            proc.kill()
            proc.wait()
        limit = argv.index(b"core.deltaBaseCacheLimit=16m")  # (ValueError without it)
        assert argv[limit - 1] == b"-c" and argv[limit + 1 :] == [
            b"--git-dir",
            str(repo.git_dir).encode(),
            b"cat-file",
            b"--batch",
            b"",
        ]


def test_finished_runs_added_a_file_at_a_time_meet_the_first_problem_add_run_meets() -> None:
    """FinishedTwice.add_runs (one update for a log file's run ids) says what add_run one by one
    says: nothing for new, distinct ids; the first run finished twice, in order, within the file or
    with an earlier file."""
    from mergegate.operations.audit_verify import FinishedTwice

    def one_by_one(batches: list[list[tuple[str, int]]]) -> tuple[str | None, dict[str, int]]:
        tally = FinishedTwice()
        for runs in batches:
            for run_id, seq in runs:
                if problem := tally.add_run(run_id, seq):
                    return problem, tally.first
        return None, tally.first

    def batched(batches: list[list[tuple[str, int]]]) -> tuple[str | None, dict[str, int]]:
        tally = FinishedTwice()
        for runs in batches:
            if problem := tally.add_runs(runs):
                return problem, tally.first
        return None, tally.first

    cases = [
        [[("a", 1), ("b", 2)], [("c", 3)], []],
        [[("a", 1), ("b", 2), ("a", 3), ("b", 4)]],  # twice in one file: the first repeat
        [[("a", 1), ("b", 2)], [("c", 3), ("b", 4), ("a", 5)]],  # with an earlier file
        [[("a", 1)], [("c", 2), ("c", 3), ("a", 4)]],
    ]
    for case in cases:
        assert batched(case) == one_by_one(case)
    assert batched(cases[0]) == (None, {"a": 1, "b": 2, "c": 3})
    assert batched(cases[2])[0] == "seq 4: run b has 2 finished records (first at seq 2)"
