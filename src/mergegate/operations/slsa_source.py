"""SLSA source-track Verification Summary Attestations of `approved` (`audit export --format
slsa-source`, issue 25).

One in-toto Statement per first-parent commit of `approved` after the trust root, in a DSSE
envelope signed with a runner's key, as a JSON Lines stream (`.intoto.jsonl`). Everything it
says comes from `mergegate verify`'s own walk (operations/verify.py): a history `verify` finds a
violation in gets no summary at all (exit 3), and a commit the walk did not reach (evidence still
awaited) gets none yet. The fields follow SLSA 1.2's source track ("Source verification summary
attestation") and the VSA predicate v1; docs/siem.md#slsa-source-summaries cites them.

- `verifiedLevels` holds `SLSA_SOURCE_LEVEL_1` (version controlled: a git revision, reached by
  `verify`'s walk from the pinned trust root). Levels 2 and 3 rest on controls of the hosting
  system (branch protection, retained history) that `verify` cannot prove offline: not claimed.
- `SLSA_SOURCE_TWO_PARTY_REVIEWED` is added where the judge counted two or more distinct people,
  none of them a writer of what they approved, for every change the commit brings
  (`Assessment.reviewed_by`): stricter than SLSA's "uploader and reviewer" reading, as the
  two-person rule of a gate is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from mergegate import __version__
from mergegate.audit.log import stamp
from mergegate.audit.records import canonical
from mergegate.crypto import dsse
from mergegate.errors import IntegrityError, UsageError
from mergegate.git.repo import Repo
from mergegate.operations.verify import CommitLine, VerifyReport, verify_history
from mergegate.rules.policy import POLICY_FILE

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/verification_summary/v1"
VERIFIER_ID = "https://mergegate.dev/verifier/verify/v1"
SLSA_VERSION = "1.2"
LEVEL = "SLSA_SOURCE_LEVEL_1"
TWO_PARTY = "SLSA_SOURCE_TWO_PARTY_REVIEWED"
# The kinds of line `verify` writes for a commit it judged (not the trust root, nor a commit it
# stopped at: "waiting", "tampering").
JUDGED = frozenset({"approval", "policy change", "veto", "unapproved", "other"})
_SCP = re.compile(r"^(?:[^@/]+@)?([^:/]+):(.+)$")  # git's scp-like `user@host:path`


@dataclass(frozen=True)
class Summaries:
    """The envelopes (one line each) and what the caller should say about the rest."""

    lines: tuple[bytes, ...]
    warnings: tuple[str, ...]


def summarise(
    *,
    repo_path: Path,
    remote: str,
    branch: str,
    fetch: bool,
    trust: str | None,
    signing_key: str,
    at: datetime,
    repository_uri: str | None = None,
) -> Summaries:
    """The signed summary of each commit `verify` judged on `branch` (IntegrityError when it found
    a violation; UsageError when the key is no runner key of the policy in force)."""
    signer = dsse.load_signer(signing_key)  # a key that cannot sign is said before the walk
    report = verify_history(
        repo_path=repo_path, remote=remote, branch=branch, fetch=fetch, trust=trust
    )
    if report.violations:
        raise IntegrityError(
            f"verify found {len(report.violations)} violation(s), so no summary is issued; the "
            f"first: {report.violations[0]}",
            hint="mergegate verify says what is wrong",
        )
    _check_runner_key(report, signer)
    uri = repository_uri or repository(Repo(repo_path), remote)
    when = stamp(at)
    lines = tuple(
        dsse.sign(
            dsse.INTOTO_PAYLOAD_TYPE,
            canonical(statement(line, resource=uri, ref=f"refs/heads/{branch}", at=when)),
            signer,
        ).to_bytes()
        for line in judged(report)
    )
    warnings = list(report.warnings)
    if report.incomplete is not None:
        sha, why, left = report.incomplete
        warnings.append(f"no summary yet for commit {sha[:12]} and the {left - 1} after it: {why}")
    return Summaries(lines, tuple(warnings))


def judged(report: VerifyReport) -> Iterator[CommitLine]:
    return (line for line in report.commits if line.kind in JUDGED)


def statement(line: CommitLine, *, resource: str, ref: str, at: str) -> dict[str, object]:
    """The in-toto Statement of one commit's summary."""
    levels = [LEVEL] + ([TWO_PARTY] if line.reviewed_by >= 2 else [])
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"digest": {"gitCommit": line.commit}, "annotations": {"sourceRefs": [ref]}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "verifier": {"id": VERIFIER_ID, "version": {"mergegate": __version__}},
            "timeVerified": at,
            "resourceUri": resource,
            "policy": {
                # The policy that judged the commit, in SPDX's download-location form.
                "uri": f"{resource}@{line.policy}#{POLICY_FILE}",
                "digest": {"gitCommit": line.policy},
            },
            "verificationResult": "PASSED",
            "verifiedLevels": levels,
            "slsaVersion": SLSA_VERSION,
        },
    }


def _check_runner_key(report: VerifyReport, signer: dsse.DsseSigner) -> None:
    policy = report.policy
    if policy is None or not policy.runners:
        raise UsageError(
            "the policy in force lists no runners: there is no runner key to sign summaries with",
            file=POLICY_FILE,
            hint="add the runner's key under `runners:` (docs/policy.md), approved as any "
            "policy change",
        )
    if signer.keyid not in {key.fingerprint for key in policy.runner_keys()}:
        raise UsageError(
            f"the signing key {signer.keyid} is not a runner key of the policy in force "
            f"({policy.where})",
            hint="sign with the key a runner of the policy signs the audit with (--signing-key)",
        )


def repository(repo: Repo, remote: str) -> str:
    """The repository as SLSA's `resourceUri` names it (SPDX download location: `git+<url>`),
    from the remote's URL without any user or password in it; a clone without that remote is
    named by its path."""
    proc = repo.run("remote", "get-url", remote, check=False)
    url = proc.stdout.decode("utf-8", "replace").strip() if proc.returncode == 0 else ""
    if not url:
        return f"git+file://{repo.path.resolve()}"
    parts = urlsplit(url)
    if parts.scheme and parts.netloc:
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        return "git+" + urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    scp = _SCP.match(url)
    if scp and "/" not in url.split(":", 1)[0]:
        return f"git+ssh://{scp.group(1)}/{scp.group(2)}"
    return f"git+file://{Path(repo.path, url).resolve()}"
