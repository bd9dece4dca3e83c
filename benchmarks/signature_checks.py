"""What does checking SSH signatures cost: in-process vs ssh-keygen, and `verify` over N approvals?

1. Per signature, for each key type (Ed25519, ECDSA nistp256/384/521, RSA
   2048/3072): a commit-sized payload signed by `ssh-keygen -Y sign`, checked
   (a) in-process by `signatures.verify_signature` (what mergegate does now) and
   (b) the way mergegate did before: a temporary allowed-signers file, the
   signature re-armoured to a file and one `ssh-keygen -Y verify` process.
2. `mergegate verify` over a gate with N approvals: `approved` holds N
   merges, each ssh-signed by the approver (Ed25519), each bringing one job
   from a side commit by the proposer. The history is built with
   `git fast-import`, then every commit is rewritten in Python with a real
   SSHSIG signature on each merge (the exact bytes `git merge -S` would
   store). Unless --no-records, `mergegate/audit` holds what a runner that
   ran every job leaves (a `started` and a `finished` record each, then a
   `scanned`), so verify also cross-checks 2N + 1 records and searches the
   earlier life of every job revision they name. Timed as a whole process
   (`python -m mergegate verify --json`).

The figures go to the section "## SSH signature checks" of docs/performance.md (notes below the end
marker are kept).

Usage: python benchmarks/signature_checks.py [--approvals 100,1000] [--repeat 3]
                                       [--no-docs] [--keep]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.serialization import load_ssh_private_key
from perfdoc import LoadWatch, cleanup, finish, header
from poll_scale import RUNNER, _commit, fast_import, past_records

from mergegate.audit import log as audit
from mergegate.audit.records import GENESIS
from mergegate.crypto.armor import armor, dearmor
from mergegate.crypto.signatures import parse_public_key, split_signed_commit, verify_signature
from mergegate.facts import audit_commits as audit_branch
from mergegate.facts.branches import AUDIT_BRANCH
from mergegate.git.repo import Repo

SECTION = "## SSH signature checks"
END_MARKER = (
    "<!-- end of signature_checks.py output: text below, up to the next ## heading, is kept -->"
)
DOCS = Path(__file__).resolve().parents[1] / "docs" / "performance.md"
KEY_TYPES = [
    ("ed25519", None),
    ("ecdsa", "256"),
    ("ecdsa", "384"),
    ("ecdsa", "521"),
    ("rsa", "2048"),
    ("rsa", "3072"),
]
T0 = 1_700_000_000
ALICE = ("alice", "alice@example.com")  # the approver: signs every merge
BOB = ("bob", "bob@example.com")  # the proposer


def isolate(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    gitconfig = home / ".gitconfig"
    gitconfig.write_text("[init]\n\tdefaultBranch = main\n")
    os.environ.update(
        {
            "HOME": str(home),
            "GIT_CONFIG_GLOBAL": str(gitconfig),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GNUPGHOME": str(home / ".gnupg"),
        }
    )
    for name in (
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "SSH_AUTH_SOCK",
        "MERGEGATE_TRUST_ROOT",
    ):
        os.environ.pop(name, None)


def run(*argv: str, cwd: Path | None = None, input: bytes | None = None) -> bytes:
    done = subprocess.run(argv, cwd=cwd, input=input, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} failed: {done.stderr.decode(errors='replace')}")
    return done.stdout


def keygen(directory: Path, name: str, kind: str, bits: str | None) -> Path:
    private = directory / name
    run(
        "ssh-keygen",
        "-q",
        "-t",
        kind,
        *(["-b", bits] if bits else []),
        "-N",
        "",
        "-C",
        name,
        "-f",
        str(private),
    )
    return private


# -- 1. per signature -------------------------------------------------------------


def per_call(fn: Callable[[], object], *, budget: float, at_least: int) -> tuple[float, int]:
    """Median seconds per call over batches, spending about `budget` seconds."""
    fn()  # warm-up (caches, imports)
    batches, calls, spent = [], 0, 0.0
    size = 1
    while spent < budget or calls < at_least:
        t = time.perf_counter()
        for _ in range(size):
            fn()
        took = time.perf_counter() - t
        batches.append(took / size)
        calls += size
        spent += took
        size = min(size * 2, 256) if took < 0.05 else size
    return statistics.median(batches), calls


def keygen_verify(payload: bytes, signature: bytes, public_line: str) -> bool:
    """The check mergegate made before sshsig.py: what every signature cost then."""
    blob = dearmor(signature.decode(), "SSH SIGNATURE") or b""
    with tempfile.TemporaryDirectory(prefix="mergegate-ssh-") as tmp:
        key_type, key_data = public_line.split()[:2]
        Path(tmp, "allowed_signers").write_text(f'k0 namespaces="git" {key_type} {key_data}\n')
        Path(tmp, "signature").write_text(armor(blob, "SSH SIGNATURE"))
        argv = [
            "ssh-keygen",
            "-Y",
            "verify",
            "-f",
            f"{tmp}/allowed_signers",
            "-I",
            "k0",
            "-n",
            "git",
            "-s",
            f"{tmp}/signature",
        ]
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": tmp, "LC_ALL": "C"}
        return (
            subprocess.run(
                argv, input=payload, capture_output=True, env=env, check=False
            ).returncode
            == 0
        )


def bench_per_signature(tmp: Path) -> list[tuple[str, float, float, int, int]]:
    payload = (
        b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nparent "
        + b"1" * 40
        + b"\nparent "
        + b"2" * 40
        + b"\nauthor alice <alice@example.com> 1700000000 +0000\n"
        b"committer alice <alice@example.com> 1700000000 +0000\n\nMerge job-1 into approved\n"
    )
    rows = []
    at = datetime.now(UTC)
    for kind, bits in KEY_TYPES:
        label = f"{kind}-{bits}" if bits else kind
        private = keygen(tmp, label, kind, bits)
        line = Path(f"{private}.pub").read_text().strip()
        signature = run(
            "ssh-keygen", "-q", "-Y", "sign", "-n", "git", "-f", str(private), input=payload
        )
        key = parse_public_key(line, owner="alice", source="policy/policy.yaml:1")
        assert verify_signature(payload, signature, [key], at=at).ok
        assert keygen_verify(payload, signature, line)
        ours, n_ours = per_call(
            lambda s=signature, k=key: verify_signature(payload, s, [k], at=at),
            budget=1.0,
            at_least=200,
        )
        theirs, n_theirs = per_call(
            lambda s=signature, li=line: keygen_verify(payload, s, li), budget=2.0, at_least=30
        )
        rows.append(
            (label if kind != "rsa" else f"{label} (rsa-sha2-512)", ours, theirs, n_ours, n_theirs)
        )
        print(
            f"  {label:12} in-process {ours * 1e3:7.3f} ms   ssh-keygen {theirs * 1e3:7.2f} ms   "
            f"{theirs / ours:5.0f}x",
            flush=True,
        )
    return rows


# -- 2. verify over N signed approvals -------------------------------------------


def _s(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def sshsig_sign(private: ed25519.Ed25519PrivateKey, public_blob: bytes, payload: bytes) -> bytes:
    """An armoured SSHSIG over `payload`, namespace git, sha512: what `ssh-keygen -Y sign` makes."""
    signed = b"SSHSIG" + _s(b"git") + _s(b"") + _s(b"sha512") + _s(hashlib.sha512(payload).digest())
    signature = _s(b"ssh-ed25519") + _s(private.sign(signed))
    blob = (
        b"SSHSIG" + (1).to_bytes(4, "big") + _s(public_blob) + _s(b"git") + _s(b"") + _s(b"sha512")
    )
    return armor(blob + _s(signature), "SSH SIGNATURE").encode()


def _data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def _fi_commit(
    mark: int,
    who: tuple[str, str],
    when: int,
    message: str,
    parents: list[str],
    files: dict[str, bytes],
) -> bytes:
    person = f"{who[0]} <{who[1]}> {when} +0000\n"
    out = [
        f"commit refs/heads/build\nmark :{mark}\n".encode(),
        f"author {person}".encode(),
        f"committer {person}".encode(),
        _data(message.encode()),
    ]
    if parents:
        out.append(f"from {parents[0]}\n".encode())
    out += [f"merge {p}\n".encode() for p in parents[1:]]
    for path, content in files.items():
        out += [f"M 100644 inline {path}\n".encode(), _data(content)]
    return b"".join(out) + b"\n"


def build_gate(
    base: Path, n: int, key_file: Path, *, records: bool = True
) -> tuple[Path, str, dict[str, float]]:
    """A bare repository whose `approved` holds `n` signed approvals; returns (path, trust root,
    timings)."""
    timings = {}
    remote = base / f"gate-{n}.git"
    run("git", "init", "-q", "--bare", str(remote))
    public_line = Path(f"{key_file}.pub").read_text().strip()
    policy = (
        "version: 1\napprovers:\n"
        f'  - name: {ALICE[0]}\n    email: {ALICE[1]}\n    key: "{public_line}"\n'
        "approvals_required: 1\ncommands:\n  - program: echo\n"
    ).encode()
    t = time.perf_counter()
    chunks = [_fi_commit(1, ALICE, T0, "initial policy", [], {"policy/policy.yaml": policy})]
    prev = ":1"
    for i in range(1, n + 1):
        when = T0 + 60 * i
        job = {f"jobs/job-{i}.yaml": f"id: job-{i}\ncommand: [echo, '{i}']\n".encode()}
        chunks.append(_fi_commit(2 * i, BOB, when, f"propose job-{i}", [prev], job))
        # fast-import starts a commit from its first parent's tree: the merge adds the job too.
        chunks.append(
            _fi_commit(
                2 * i + 1,
                ALICE,
                when + 30,
                f"Merge job-{i} into approved",
                [prev, f":{2 * i}"],
                job,
            )
        )
        prev = f":{2 * i + 1}"
    marks = base / f"gate-{n}.marks"
    run(
        "git",
        "fast-import",
        "--quiet",
        f"--export-marks={marks}",
        cwd=remote,
        input=b"".join(chunks),
    )
    by_mark = {
        int(m[1:]): sha for m, sha in (line.split() for line in marks.read_text().splitlines())
    }
    timings["fast-import"] = time.perf_counter() - t
    # Rewrite oldest first: new parents, and a signature on each merge, as git merge -S stores it.
    t = time.perf_counter()
    private = load_ssh_private_key(key_file.read_bytes(), None)
    assert isinstance(private, ed25519.Ed25519PrivateKey)
    public_blob = base64.b64decode(public_line.split()[1])
    order = [by_mark[m] for m in range(1, 2 * n + 2)]
    raw = read_objects(remote, order)
    new: dict[str, str] = {}
    objects = remote / "objects"
    for mark, old in enumerate(order, start=1):
        header, _, message = raw[old].partition(b"\n\n")
        lines = [
            b"parent " + new[line[7:].decode()].encode() if line.startswith(b"parent ") else line
            for line in header.split(b"\n")
        ]
        body = b"\n".join(lines) + b"\n\n" + message
        if mark > 1 and mark % 2 == 1:  # a merge
            signature = sshsig_sign(private, public_blob, body)
            continued = b"\n ".join(signature.rstrip(b"\n").split(b"\n"))
            head, _, rest = body.partition(b"\n\n")
            body = head + b"\ngpgsig " + continued + b"\n\n" + rest
        new[old] = write_loose(objects, b"commit", body)
    run("git", "update-ref", "refs/heads/approved", new[order[-1]], cwd=remote)
    run("git", "update-ref", "-d", "refs/heads/build", cwd=remote)
    if records:
        # Every job ran: the log a runner leaves, sealed and committed as one audit commit.
        merges = [new[order[2 * i]] for i in range(1, n + 1)]
        blobs = {
            f"jobs/job-{i}.yaml": hashlib.sha1(b"blob %d\0" % len(job) + job).hexdigest()
            for i in range(1, n + 1)
            for job in [f"id: job-{i}\ncommand: [echo, '{i}']\n".encode()]
        }
        sealed = audit.seal(
            past_records(n, new[order[0]], merges, blobs), after_seq=0, after_hash=GENESIS
        )
        files = audit.append(Repo(remote), None, audit.read_tail(Repo(remote), None), sealed)
        message = audit_branch.message(f"mergegate: audit seq 1-{len(sealed)}", merges[-1])
        fast_import(
            remote,
            _commit(
                f"refs/heads/{AUDIT_BRANCH}", None, RUNNER, T0 + 60 * n + 60, message, [], files
            ),
        )
    run("git", "repack", "-a", "-d", "-q", cwd=remote)
    timings["sign and rewrite"] = time.perf_counter() - t
    # Sanity: the last merge carries a signature mergegate accepts.
    split = split_signed_commit(raw_object(remote, new[order[-1]]))
    assert split is not None
    key = parse_public_key(public_line, owner="alice", source="policy/policy.yaml:5")
    assert verify_signature(*split, [key], at=datetime.now(UTC)).ok
    return remote, new[order[0]], timings


def read_objects(repo: Path, shas: list[str]) -> dict[str, bytes]:
    out = run(
        "git", "cat-file", "--batch", cwd=repo, input="".join(f"{s}\n" for s in shas).encode()
    )
    objects, pos = {}, 0
    for sha in shas:
        end = out.index(b"\n", pos)
        size = int(out[pos:end].split()[2])
        objects[sha] = out[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
    return objects


def raw_object(repo: Path, sha: str) -> bytes:
    return run("git", "cat-file", "commit", sha, cwd=repo)


def write_loose(objects: Path, kind: bytes, body: bytes) -> str:
    store = kind + b" %d\0" % len(body) + body
    sha = hashlib.sha1(store).hexdigest()
    folder = objects / sha[:2]
    folder.mkdir(exist_ok=True)
    (folder / sha[2:]).write_bytes(zlib.compress(store, 1))
    return sha


def time_verify(remote: Path, root: str, repeat: int) -> tuple[float, float, str]:
    argv = [
        sys.executable,
        "-m",
        "mergegate",
        "verify",
        "--repo",
        str(remote),
        "--trust-root",
        root,
        "--json",
    ]
    times, last = [], ""
    for _ in range(repeat):
        t = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - t)
        if done.returncode != 0:
            raise RuntimeError(
                f"verify failed ({done.returncode}): {done.stderr or done.stdout[-500:]}"
            )
        last = done.stdout
    return statistics.median(times), min(times), last


# -- main ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--approvals",
        default="100,1000",
        help="comma-separated sizes N of the verify benchmark (default 100,1000)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="timed verify runs per size (default 3)"
    )
    parser.add_argument("--no-docs", action="store_true", help=f"do not rewrite {DOCS.name}")
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary gates (their path is printed)"
    )
    parser.add_argument(
        "--no-records",
        action="store_true",
        help="leave mergegate/audit empty "
        "(by default it holds the records of every job having run)",
    )
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.approvals.split(",") if n.strip()]
    command = "python benchmarks/signature_checks.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    tmp = Path(tempfile.mkdtemp(prefix="mergegate-bench-sig-"))
    load = LoadWatch()
    try:
        isolate(tmp / "home")
        print("per signature:", flush=True)
        rows = bench_per_signature(tmp)
        load.sample()
        key = keygen(tmp, "alice", "ed25519", None)
        verify_rows = []
        for n in sizes:
            remote, root, timings = build_gate(tmp, n, key, records=not args.no_records)
            median, fastest, out = time_verify(remote, root, args.repeat)
            report = json.loads(out)
            approvals = sum(1 for c in report["commits"] for j in c["jobs"] if j["approved"])
            if (
                approvals != n
                or report["violations"]
                or report["records"] != (0 if args.no_records else 2 * n + 1)
            ):
                # every merge judged and approved, every record checked, or the figure means nothing
                raise RuntimeError(
                    f"verify approved {approvals} of {n} jobs; {report['records']} records; "
                    f"{report['violations'][:3]}"
                )
            load.sample()
            verify_rows.append((n, median, fastest, timings))
            print(
                f"verify, {n} approvals: median {median:.2f} s, min {fastest:.2f} s "
                f"({median / n * 1e3:.1f} ms per approval)",
                flush=True,
            )
        lines = [
            *header(command, load),
            "",
            "Per signature, a commit-sized payload (median of batches after a warm-up):",
            "",
            "| key | in-process (ms) | ssh-keygen process (ms) | ratio |",
            "|---|---:|---:|---:|",
            *(
                f"| {label} | {ours * 1e3:.3f} | {theirs * 1e3:.2f} | {theirs / ours:.0f}x |"
                for label, ours, theirs, _, _ in rows
            ),
            "",
            "In-process is `signatures.verify_signature` (de-armour, parse, match the policy key, "
            "`cryptography` verify, lifetime); ssh-keygen is the former path (temporary "
            "allowed-signers "
            "file, one `ssh-keygen -Y verify` process per signature).",
            "",
            "`mergegate verify` over N signed approvals (whole process, "
            f"median of {args.repeat}; gate built with fast-import, merges re-signed in Python; "
            + (
                "no records"
                if args.no_records
                else "with the 2N + 1 records of every job having run"
            )
            + "):",
            "",
            "| approvals | median (s) | min (s) | per approval (ms) | build (s) |",
            "|---:|---:|---:|---:|---:|",
            *(
                f"| {n} | {med:.2f} | {low:.2f} | {med / n * 1e3:.1f} | {sum(t.values()):.1f} |"
                for n, med, low, t in verify_rows
            ),
        ]
        finish(no_docs=args.no_docs, docs=DOCS, section=SECTION, end_marker=END_MARKER, lines=lines)
    finally:
        cleanup(tmp, keep=args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
