"""The runner's attestations: one signed in-toto statement per run end, in the commit recording it.

Every `finished` record a runner pushes (a result, a run closed as lost or interrupted, one denied
before start) gets `audit/attestations/<run id>.intoto.json` in the same commit: the statement
audit/attestation.py makes from the run's `started` and `finished` records, in a DSSE envelope
signed with `--signing-key` (crypto/dsse.py). Only when the policy in force lists `runners`: without
them no key is trusted to sign, and the runner says so once and writes none. An OpenPGP or FIDO
(`sk-`) signing key cannot sign a DSSE envelope a standard tool checks: said once, none written
(`audit verify` asks attestations of a runner name only from its first one on).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from mergegate.audit import attestation
from mergegate.audit import log as audit
from mergegate.audit.records import Finished, Record, Started
from mergegate.crypto import dsse
from mergegate.errors import UsageError
from mergegate.git.repo import Repo
from mergegate.rules.policy import POLICY_FILE, Policy


class Attestor:
    """Signs the attestations of one runner process (its key read once, each warning said once)."""

    def __init__(self, repo: Repo, signing_key: str | None) -> None:
        self.repo = repo
        self.signing_key = signing_key
        self._signer: dsse.DsseSigner | None = None
        self._why_none: str | None = (
            None  # why this runner writes none (None: it signs, or not asked yet)
        )
        self._said: set[str] = set()
        # Why this runner writes no attestations (no runners, an OpenPGP or FIDO key): said with
        # the pass's warnings, but a fact of the setup, not an anomaly, so a pass that only says
        # this may still be remembered as quiet (runner/idle.py).
        self.notes: list[str] = []

    def check(self, policy: Policy) -> None:
        """Before any job runs under `policy`: a key that should sign attestations and cannot
        (a passphrase key no agent holds, an unreadable file) stops the pass (UsageError)."""
        if policy.runners and self.signing_key is not None:
            self._load()

    def files(
        self,
        sealed: Sequence[Record],
        *,
        policy: Policy,
        known: Iterable[Started],
        parent: str | None,
    ) -> dict[str, bytes]:
        """The attestation files of the `finished` records among `sealed` (path -> bytes), to be
        committed on `parent`; `known` are `started` records already read (others are looked up
        at `parent`)."""
        ends = [r for r in sealed if isinstance(r, Finished) and r.run_id]
        if not ends:
            return {}
        if not policy.runners:
            self._note(
                f"{policy.where} lists no runners: no key is trusted to sign a run's attestation, "
                "so none is written (list the runner's key under runners to have them)"
            )
            return {}
        signer = self._load()
        if signer is None:
            return {}
        starts = {s.run_id: s for s in known if s.run_id}
        starts.update((r.run_id, r) for r in sealed if isinstance(r, Started) and r.run_id)
        found: dict[str, bytes] = {}
        for end in ends:
            run_id = str(end.run_id)
            started = starts.get(run_id) or self._started(run_id, parent)
            if started is None or not started.blob:
                self._say(f"run {run_id}: its started record was not found; no attestation")
                continue
            found[attestation.path_of(run_id)] = self._envelope(started, end, signer)
        return found

    def _envelope(self, started: Started, finished: Finished, signer: dsse.DsseSigner) -> bytes:
        statement = attestation.statement(
            started,
            finished,
            job_bytes=self.repo.blob(str(started.blob)),
            policy_blob=(
                self.repo.file_blob(started.policy_commit, POLICY_FILE)
                if started.policy_commit
                else None
            ),
        )
        payload = attestation.payload(statement)
        return dsse.sign(dsse.INTOTO_PAYLOAD_TYPE, payload, signer).to_bytes()

    def _started(self, run_id: str, parent: str | None) -> Started | None:
        """The run's `started` record on the audit branch at `parent` (a run closed by another
        runner, or found in the spool: not in this pass's book)."""
        for record in audit.grep(self.repo, parent, run_id):
            if isinstance(record, Started) and record.run_id == run_id:
                return record
        return None

    def _load(self) -> dsse.DsseSigner | None:
        if self._signer is not None or self._why_none is not None:
            return self._signer
        key = self.signing_key
        if key is None:
            self._why_none = "no --signing-key"
        elif not os.path.isfile(key):
            self._why_none = (
                f"--signing-key {key} is an OpenPGP key: attestations are DSSE envelopes signed "
                "with an ssh key (Ed25519, ECDSA or RSA), so none is written"
            )
        else:
            try:
                self._signer = dsse.load_signer(key)
            except UsageError as exc:
                if "FIDO" not in exc.message:
                    raise
                self._why_none = f"{exc.message}: no attestation is written"
        if self._why_none is not None:
            self._note(self._why_none)
        return self._signer

    def _note(self, note: str) -> None:
        if note not in self._said:
            self._said.add(note)
            self.notes.append(note)

    def _say(self, warning: str) -> None:
        if warning not in self._said:
            self._said.add(warning)
            self.repo.warnings.append(warning)
