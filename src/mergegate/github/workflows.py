"""The GitHub Actions workflows `mergegate init --github` writes into a gate repository.

The pull-request check, and a runner: one pass per push (`mergegate-run.yml`), or with
`--fan-out` one matrix entry per runnable job (`mergegate-fan-out.yml`, docs/github.md).

Both are linted in CI (actionlint, `zizmor --offline`, check-jsonschema). The rules
they follow, each a past or well-known way Actions gates were broken:
- least privilege: the pull-request check reads only; only the runner's job may write;
- `persist-credentials: false`: no token is left in `.git/config` for a job to read;
- the pull-request check runs on `pull_request` (never `pull_request_target`), on the
  merge ref, so forks work and a fork's branch name means nothing;
- no `${{ }}` of anything a proposer controls inside a `run:` script: values travel
  through `env:` and are quoted data;
- the runner's concurrency group never cancels a run in progress;
- matrix values (job paths from `mergegate plan`) reach the action as inputs, which it
  passes to its script through `env:`;
- an unset trust-root variable fails the run with a clear message;
- the runner's key is read from the GitHub Environment `mergegate`, whose deployment
  branches the gate's owner limits to `approved`: a workflow on any other branch gets
  no key (docs/github.md).
"""

from __future__ import annotations

from mergegate.errors import UsageError

# Third-party actions are pinned to a commit id (a tag can be moved by whoever controls it).
CHECKOUT = "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683"
CHECKOUT_VERSION = "v4.2.2"  # written next to the pin, for whoever reviews or bumps it
ENVIRONMENT = "mergegate"  # the GitHub Environment holding MERGEGATE_RUNNER_KEY
# Where a user gets the full commit id to pin (there may be no tags; an annotated tag's
# ls-remote line names the tag object, its `^{}` line the commit).
PIN_HINT = (
    "pin the full commit id of the mergegate you reviewed: git -C YOUR_MERGEGATE_CHECKOUT "
    "rev-parse HEAD, "
    "or for a tag: git ls-remote https://github.com/OWNER/mergegate 'refs/tags/TAG^{}'"
)
CHECK_PATH = ".github/workflows/mergegate-check.yml"
RUN_PATH = ".github/workflows/mergegate-run.yml"
FAN_OUT_PATH = ".github/workflows/mergegate-fan-out.yml"

CHECK = """\
# mergegate: check every pull request into `approved` against the policy in force.
# Written by `mergegate init --github`; see mergegate's docs/github.md.
name: mergegate check
on:
  pull_request:
    branches: [approved]

permissions:
  contents: read
  pull-requests: read

jobs:
  check:
    name: mergegate check
    runs-on: ubuntu-latest
    timeout-minutes: 15
    steps:
      # The merge ref (refs/pull/N/merge, the default for pull_request): works for forks,
      # and the fork's branch name is never used.
      - uses: {checkout} # {checkout_version}
        with:
          fetch-depth: 0
          persist-credentials: false
      - uses: {action}
        with:
          command: check
          trust-root: ${{{{ vars.MERGEGATE_TRUST_ROOT }}}}
          github-token: ${{{{ github.token }}}}
"""

# Both runner workflows: every push to approved, a schedule (a job that waited for evidence,
# or for its retry, is judged again) and by hand; no permission unless a job asks for one.
TRIGGERS = """\
on:
  push:
    branches: [approved]
  schedule:
    - cron: "17,47 * * * *"
  workflow_dispatch:

permissions: {{}}
"""

# The checkout every runner job starts with: approved's whole history, no credentials kept.
CHECKOUT_APPROVED = """\
      - uses: {checkout} # {checkout_version}
        with:
          ref: approved
          fetch-depth: 0
          persist-credentials: false
"""

# A pass of the runner: the checkout of approved (no credentials kept) and the action's `run`.
RUN_STEPS = (
    """\
    steps:
"""
    + CHECKOUT_APPROVED
    + """\
      - uses: {action}
        with:
          command: run
          trust-root: ${{{{ vars.MERGEGATE_TRUST_ROOT }}}}
          signing-key: ${{{{ secrets.MERGEGATE_RUNNER_KEY }}}}
          github-token: ${{{{ github.token }}}}
          report: true    # each result on its pull request: a commit status and a comment
"""
)

# What a job of the runner may do with its token: push the records, read the review evidence,
# and (`report: true`) post each result's commit status and comment on its pull request.
RUNNER_PERMISSIONS = """    permissions:
      contents: write       # to push records to mergegate/audit (protect approved separately)
      pull-requests: write  # review evidence for GitHub-made merges; the result's comment
      statuses: write       # the result's commit status (mergegate/<job id>)
"""

RUN = (
    """\
# mergegate: run newly approved jobs once per push to `approved` (and on a schedule,
# so a job that waited for evidence is judged again). Records go to mergegate/audit.
# `schedule` and `workflow_dispatch` use this file as it is on the default branch:
# make `approved` the default branch. Written by `mergegate init --github`; see
# mergegate's docs/github.md.
name: mergegate run
"""
    + TRIGGERS
    + """
# One runner at a time, and never cancel one mid-job: a cancelled run could leave a
# started job without its result.
concurrency:
  group: mergegate-runner
  cancel-in-progress: false

jobs:
  run:
    name: mergegate run
    runs-on: ubuntu-latest
    timeout-minutes: 60
    # The runner's key is a secret of this Environment; limit its deployment branches to
    # `approved` so that no workflow on another branch can read it (docs/github.md).
    environment: {environment}
"""
    + RUNNER_PERMISSIONS
    + RUN_STEPS
)


FAN_OUT = (
    """\
# mergegate: fan a merge of many jobs out over a matrix, one runner per job.
# `plan` lists the runnable jobs (the runner's own planning); each matrix entry claims
# and runs exactly its job (`mergegate run --once --job PATH`: the same at-most-once
# claim as any pass, so an entry whose job another runner took exits 0); `sweep` then
# records what a pass records besides runs (refusals, lost leases, how far it got).
# Written by `mergegate init --github --fan-out`; see mergegate's docs/github.md.
name: mergegate fan-out
"""
    + TRIGGERS
    + """
# One fan-out at a time, never cancelled mid-job (a newer pending run replaces an older
# pending one, which had not started: its plan is the newer run's plan).
concurrency:
  group: mergegate-runner
  cancel-in-progress: false

jobs:
  plan:
    name: mergegate plan
    runs-on: ubuntu-latest
    timeout-minutes: 15
    permissions:
      contents: read
      pull-requests: read   # review evidence for GitHub-made merges
    outputs:
      matrix: ${{{{ steps.plan.outputs.matrix }}}}
      count: ${{{{ steps.plan.outputs.count }}}}
    steps:
"""
    + CHECKOUT_APPROVED
    + """\
      - id: plan
        uses: {action}
        with:
          command: plan
          trust-root: ${{{{ vars.MERGEGATE_TRUST_ROOT }}}}
          github-token: ${{{{ github.token }}}}

  run:
    name: mergegate run ${{{{ matrix.job }}}}
    needs: plan
    if: needs.plan.outputs.count != '0'
    runs-on: ubuntu-latest
    timeout-minutes: 60
    # The runner's key is a secret of this Environment (deployment branches: approved).
    environment: {environment}
"""
    + RUNNER_PERMISSIONS
    + """    strategy:
      fail-fast: false      # one failed job must not cancel the others mid-run
      max-parallel: 20
      matrix: ${{{{ fromJSON(needs.plan.outputs.matrix) }}}}
    steps:
"""
    + CHECKOUT_APPROVED
    + """\
      - uses: {action}
        with:
          command: run
          job: ${{{{ matrix.path }}}}
          # A name of its own per entry: a cancelled entry's job is then closed only by
          # its lease, never by a sibling that took it for its own orphan.
          runner-name: gha-${{{{ github.run_id }}}}-${{{{ strategy.job-index }}}}
          trust-root: ${{{{ vars.MERGEGATE_TRUST_ROOT }}}}
          signing-key: ${{{{ secrets.MERGEGATE_RUNNER_KEY }}}}
          github-token: ${{{{ github.token }}}}
          report: true    # each result on its pull request: a commit status and a comment

  sweep:
    name: mergegate sweep
    needs: [plan, run]
    if: ${{{{ !cancelled() && needs.plan.result == 'success' }}}}
    runs-on: ubuntu-latest
    timeout-minutes: 60
    # The runner's key is a secret of this Environment (deployment branches: approved).
    environment: {environment}
"""
    + RUNNER_PERMISSIONS
    + RUN_STEPS
)


def files(*, action: str, fan_out: bool = False) -> dict[str, str]:
    """Path -> text of the workflows for a gate that uses `action` (OWNER/REPO@COMMIT).

    With `fan_out`, the runner is the matrix workflow instead of the one-pass workflow
    (both run on every push to approved; a gate uses one).
    """
    check_action(action)
    values = {
        "action": action,
        "checkout": CHECKOUT,
        "checkout_version": CHECKOUT_VERSION,
        "environment": ENVIRONMENT,
    }
    runner = (FAN_OUT_PATH, FAN_OUT) if fan_out else (RUN_PATH, RUN)
    return {CHECK_PATH: CHECK.format(**values), runner[0]: runner[1].format(**values)}


def check_action(action: str) -> None:
    """`OWNER/REPO@COMMIT`, pinned to a full commit id: the action runs next to a write token."""
    name, _, ref = action.partition("@")
    if (
        name.count("/") < 1
        or not all(name.split("/"))
        or len(ref) != 40
        or any(c not in "0123456789abcdef" for c in ref)
    ):
        raise UsageError(
            f"--action {action!r} is not OWNER/REPO@COMMIT with a full 40-hex commit id",
            hint=PIN_HINT,
        )


if (
    __name__ == "__main__"
    # python -m mergegate.github.workflows DIR ACTION: what .ci/lint-workflows lints (every
    # workflow)
):
    import sys
    from pathlib import Path

    for path, text in {
        **files(action=sys.argv[2]),
        **files(action=sys.argv[2], fan_out=True),
    }.items():
        target = Path(sys.argv[1]) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
