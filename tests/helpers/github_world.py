"""A gate on "GitHub": real repositories whose merges are real merge/squash/rebase commits,
made as GitHub makes them, and the loopback API that describes the pull requests."""

from __future__ import annotations

from typing import Any

from tests.helpers.fake_github import FakeGitHub, PrCommit, PullRequest, ago
from tests.helpers.keys import SshKey, shared_ssh_key
from tests.helpers.repos import ECHO_RULE, Person, Result, World, job_yaml, policy_yaml

ALICE, BOB, CAROL, DAVE = 101, 102, 103, 200  # GitHub ids; dave proposes and is in no policy
GITHUB = {"GIT_COMMITTER_NAME": "GitHub", "GIT_COMMITTER_EMAIL": "noreply@github.com"}


class GithubGate:
    def __init__(self, world: World, fake: FakeGitHub) -> None:
        self.world = world
        self.fake = fake
        self.numbers = 0
        # Review approvals need runners (stored evidence is only as good as the audit commits'
        # signatures).
        self.runner_key = shared_ssh_key(world.tmp / "keys", "runner")
        self.runners = [{"name": "gha", "key": self.runner_key.public_line}]

    @property
    def runner_args(self) -> tuple[str, ...]:
        return ("--signing-key", str(self.runner_key.private), "--runner-name", "gha")

    def setup(
        self, *, required: int = 1, approvers: list[dict[str, Any]] | None = None, **extra: Any
    ) -> str:
        w = self.world
        people = (
            approvers
            if approvers is not None
            else [
                w.alice.approver_entry(github=ALICE),
                w.bob.approver_entry(github=BOB),
                w.carol.approver_entry(github=CAROL),
            ]
        )
        extra.setdefault("runners", self.runners)
        return w.setup(policy_yaml(people, [ECHO_RULE], approvals_required=required, **extra))

    def run_once(
        self, *args: str, env: dict[str, str] | None = None, where: str = "runner"
    ) -> Result:
        """One runner pass against the fake API, signed with the runner key."""
        return self.world.run_once(
            *self.runner_args, *args, env={**self.fake.env(), **(env or {})}, where=where
        )

    def open_pr(
        self,
        branch: str,
        files: dict[str, str] | None = None,
        *,
        author: int = DAVE,
        who: Person | None = None,
        commit_author: int | str | None = "same",
    ) -> PullRequest:
        """Push a proposal branch and describe it as an open PR (head also at refs/pull/N/head)."""
        w = self.world
        head = w.propose(
            branch,
            files or {f"jobs/{branch}.yaml": job_yaml(branch, ["echo", branch])},
            who=who or w.mallory,
        )
        self.numbers += 1
        number = self.numbers
        w.git("proposer", "push", "-q", "origin", f"{head}:refs/pull/{number}/head")
        cid = author if commit_author == "same" else commit_author
        pr = PullRequest(
            number=number,
            author=author,
            head_sha=head,
            merge_commit_sha="",
            merged=False,
            head_ref=branch,
            commits=[self._commit(head, cid if not isinstance(cid, str) else author)],
        )
        return self.fake.add_pull(pr)

    def push_more(
        self, pr: PullRequest, files: dict[str, str], *, force: bool = False, uid: int | None = None
    ) -> str:
        """A new head for the PR (a new commit, or with `force` an amended one)."""
        w = self.world
        w.git("proposer", "checkout", "-q", pr.head_ref)
        w.write("proposer", files)
        w.git("proposer", "add", "-A")
        w.git(
            "proposer",
            "commit",
            "-q",
            *(["--amend", "--no-edit"] if force else ["-m", "more"]),
            who=w.mallory,
        )
        w.git("proposer", "push", "-q", "-f", "origin", pr.head_ref)
        head = w.git("proposer", "rev-parse", "HEAD")
        w.git("proposer", "push", "-q", "-f", "origin", f"{head}:refs/pull/{pr.number}/head")
        author = uid if uid is not None else pr.author
        commit = self._commit(head, author)
        if force:
            pr.commits[-1] = commit
            pr.force_pushes.append(ago(-1))  # pushed a minute after the reviews
            for review in pr.reviews:  # GitHub re-points old reviews at the new head
                review.commit_id = head
        else:
            pr.commits.append(commit)
        pr.head_sha = head
        return head

    def _commit(self, sha: str, uid: int | None) -> PrCommit:
        """A PR commit as GitHub lists it, with the real commit's author date, message and tree."""
        self.world.git("proposer", "fetch", "-q", "origin")
        date, tree = self.world.git("proposer", "log", "-1", "--format=%aI %T", sha).split()
        message = self.world.git("proposer", "log", "-1", "--format=%B", sha)
        return PrCommit(sha, uid, uid, author_date=date, message=message, tree=tree)

    def reviewed_merge(
        self,
        branch: str,
        reviewer: int,
        files: dict[str, str] | None = None,
        *,
        method: str = "merge",
    ) -> PullRequest:
        """Open a PR, approve its head with `reviewer`'s review, and merge it with the button."""
        pr = self.open_pr(branch, files)
        self.fake.review(pr.number, reviewer, "APPROVED", pr.head_sha)
        self.merge(pr, method=method)
        return pr

    def merge(
        self,
        pr: PullRequest,
        *,
        method: str = "merge",
        sign: SshKey | None = None,
        gpg: tuple[list[str], dict[str, str]] | None = None,
    ) -> str:
        """Merge the PR into approved as GitHub's merge button would, and mark it merged.

        `gpg` (`keys.git_signing_config_gpg`) signs a merge with an OpenPGP key, as GitHub's
        web-flow key does."""
        w = self.world
        where = "approver"
        w.git(where, "fetch", "-q", "origin")
        w.git(where, "checkout", "-q", "-B", "approved", "origin/approved")
        signing = ["-S"] if sign is not None or gpg is not None else []
        if method == "merge":
            w.git(
                where,
                "merge",
                "-q",
                "--no-ff",
                *signing,
                "-m",
                f"Merge pull request #{pr.number} from acme/{pr.head_ref}",
                pr.head_sha,
                who=w.alice,
                sign=sign,
                env={**gpg[1], **GITHUB} if gpg else GITHUB,
                config=gpg[0] if gpg else None,
            )
        elif method == "squash":
            w.git(where, "merge", "-q", "--squash", pr.head_sha, who=w.alice, env=GITHUB)
            # GitHub authors a squash as the pull request's author.
            w.git(
                where,
                "commit",
                "-q",
                *signing,
                "-m",
                f"{pr.title} (#{pr.number})",
                who=w.mallory,
                sign=sign,
                env=GITHUB,
            )
        elif method == "rebase":
            base = w.git(where, "merge-base", "HEAD", pr.head_sha)
            for sha in w.git(where, "rev-list", "--reverse", f"{base}..{pr.head_sha}").split():
                w.git(
                    where,
                    "cherry-pick",
                    "--allow-empty",
                    sha,
                    who=w.mallory,
                    sign=sign,
                    env=GITHUB,
                    config=["-c", "commit.gpgsign=true"] if sign else None,
                )
        w.git(where, "push", "-q", "origin", "approved")
        sha = w.git(where, "rev-parse", "HEAD")
        pr.merged, pr.merge_commit_sha, pr.merged_at = True, sha, ago(0)
        return sha
