"""`mergegate inbox`: proposals waiting for a decision, with check's verdict and who may approve."""

from __future__ import annotations

from pathlib import Path

from mergegate.commands import output
from mergegate.operations.inbox import inbox


def main(
    *, repo: Path, remote: str, base: str, fetch: bool, trust_root: str | None, as_json: bool
) -> int:
    box = inbox(repo_path=repo, remote=remote, base=base, fetch=fetch, trust=trust_root)
    output.warn(box.warnings)
    if as_json:
        output.emit({"base": box.base, "proposals": [i.as_json() for i in box.items]})
        return 0
    if not box.items:
        output.line(f"inbox empty: no branch changes a job or policy file relative to {box.base}")
        return 0
    for item in box.items:
        pr = f"  PR #{item.pull}" if item.pull is not None else ""
        output.line(f"{output.state(item.verdict, 8)} {item.ref} ({item.head[:7]}){pr}")
        if item.error:
            output.line(f"         {output.brief(item.error)}")
        for f in item.files:
            output.line(f"         {f['state']:<8} {f['path']}: {output.brief(str(f['reason']))}")
            if f["approvals"]:
                output.line(f"                  approvals: {output.brief(str(f['approvals']))}")
        if item.verdict == "allowed":
            who = ", ".join(item.may_approve) or "nobody: every approver wrote part of it"
            output.line(f"         may approve: {who}")
            if item.pull is not None:
                output.line(
                    f"         next: review PR #{item.pull} and merge it (merge commit or squash), "
                    f"or mergegate approve {item.ref} --merge"
                )
            else:
                output.line(
                    f"         next: review the diff, then mergegate approve {item.ref} --merge"
                )
    return 0
