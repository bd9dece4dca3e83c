"""`mergegate run`: one pass (`--once`) or a loop of passes."""

from __future__ import annotations

from pathlib import Path

from mergegate.commands import output
from mergegate.errors import MergegateError
from mergegate.runner import Options, PassResult, Runner


def main(*, repo: Path, remote: str, branch: str, fetch: bool, trust_root: str | None, as_json: bool, once: bool,
         interval: float, runner_name: str, signing_key: str | None, output_dir: Path | None) -> int:
    runner = Runner(Options(repo=repo, remote=remote, branch=branch, fetch=fetch, runner_name=runner_name,
                            trust_root=trust_root, signing_key=signing_key, output_dir=output_dir))

    def show(result: PassResult) -> None:
        _show(result, as_json=as_json, once=once)

    if once:
        result = runner.run_once()
        show(result)
        return result.exit_code

    def retry(exc: MergegateError) -> None:
        output.line(f"error: {exc} (retrying in {interval:g}s)", err=True)

    runner.run_forever(interval=interval, on_pass=show, on_error=retry)
    return 0


def _show(result: PassResult, *, as_json: bool, once: bool) -> None:
    output.warn(result.warnings)
    if as_json:
        changes = [{"commit": c, "status": s, "reason": r} for c, s, r in result.policy_changes]
        output.emit({"tip": result.tip, "jobs": [o.as_json() for o in result.outcomes], "policy_changes": changes,
                     "exit_code": result.exit_code})
        return
    for commit, state, _ in result.policy_changes:
        output.line(f"policy    {output.state(state)} ({commit[:7]})")
    for o in result.outcomes:
        reason = ": " + o.reason if o.reason and o.status != "succeeded" else ""
        output.line(f"{output.state(o.status, 10)} {o.job or o.path}  ({o.commit[:7]}){reason}")
    if not result.outcomes and once:
        output.line("nothing to run")
