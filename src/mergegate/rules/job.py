"""Job: a frozen value built only through validation of a file under jobs/."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mergegate.errors import ConfigError, UsageError
from mergegate.rules import config

JOBS_DIR = "jobs/"
JOB_SUFFIXES = (".yaml", ".yml")

# Names a job may never set, whatever the policy says: they change which program or library runs, or
# hand the job the runner's credentials.
FORBIDDEN_ENV: frozenset[str] = frozenset(
    {
        "PATH",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "SSH_AUTH_SOCK",
        "BASH_ENV",
        "ENV",
        "IFS",
        "PERL5LIB",
        "PERL5OPT",
        "RUBYLIB",
        "RUBYOPT",
        "NODE_OPTIONS",
        "GCONV_PATH",
        "GLIBC_TUNABLES",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "GPG_AGENT_INFO",
        # Where allowed programs read their own configuration and code from: a job that sets these
        # changes what an allowed program does (a ~/.gitconfig with core.pager, a .pth file in the
        # user site, an OpenSSL engine).
        "HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "PERLLIB",
        "PYTHONUSERBASE",
        "PYTHONWARNINGS",
        "PYTHONINSPECT",
        "OPENSSL_CONF",
        "LOCPATH",
        "CURL_HOME",
        "WGETRC",
    }
)
FORBIDDEN_ENV_PREFIXES: tuple[str, ...] = ("LD_", "DYLD_", "GIT_", "MERGEGATE_")


# A runner label (`run --label`), as a job's `runs_on` entries (schemas/job.schema.json).
LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def runner_labels(values: Iterable[str]) -> tuple[str, ...]:
    """A runner's --label values, checked as job files check runs_on; a bad one is a usage error."""
    labels = []
    for value in values:
        if not LABEL.match(value):
            raise UsageError(
                f"--label {value!r} is not a label: letters, digits, '.', '_' and '-', starting "
                "with a letter or digit, at most 64",
                hint="labels are matched exactly against a job's runs_on, e.g. --label gpu --label "
                "linux",
            )
        labels.append(value)
    return tuple(sorted(set(labels)))


def is_job_path(path: str) -> bool:
    return path.startswith(JOBS_DIR) and path.endswith(JOB_SUFFIXES)


def job_stem(path: str) -> str:
    name = posixpath.basename(path)
    return name.rsplit(".", 1)[0]


def forbidden_env_name(name: str, reserved: Sequence[str] = ()) -> bool:
    """True when a job file must not set `name` (compared case-insensitively)."""
    upper = name.upper()
    return (
        upper in FORBIDDEN_ENV
        or upper.startswith(FORBIDDEN_ENV_PREFIXES)
        or upper in {r.upper() for r in reserved}
    )


@dataclass(frozen=True)
class Job:
    """One revision of one job file: what to run, and exactly which bytes said so."""

    id: str
    path: str
    blob: str
    command: tuple[str, ...]
    description: str | None = None
    timeout_seconds: int | None = None
    cwd: str = "."
    env: tuple[tuple[str, str], ...] = ()
    labels: tuple[str, ...] = ()
    runs_on: tuple[str, ...] = ()  # a runner must have all of these labels to claim it
    retries: int = 0  # failed or timed-out attempts run again, at most this often
    idempotent: bool = False  # may run again after a lost attempt (its runner died mid-run)

    @property
    def env_map(self) -> dict[str, str]:
        return dict(self.env)


def parse_job(text: bytes, *, path: str, blob: str) -> Job:
    """Validate a job file; every problem is a ConfigError naming the file, line and field."""
    doc = config.load(text, file=path, schema="job")
    data = doc.data
    # 1. The id is the file's name, so a path names one job and a reviewer
    #    cannot be shown one id while another runs.
    if data["id"] != job_stem(path):
        raise doc.error(
            ("id",), f"field 'id': '{data['id']}' must equal the file name '{job_stem(path)}'"
        )
    # 2. cwd stays inside the export; symlinks are resolved again at run time.
    cwd = data.get("cwd", ".")
    normal = posixpath.normpath(cwd)
    if posixpath.isabs(cwd) or normal == ".." or normal.startswith("../"):
        raise doc.error(("cwd",), f"field 'cwd': '{cwd}' must be a path inside the repository")
    # 3. Environment names that would change what runs or reach credentials.
    env = data.get("env", {})
    for name in env:
        if forbidden_env_name(name):
            raise doc.error(("env", name), f"field 'env.{name}': a job may not set {name}")
    # 4. Credentials do not belong in a file that lands in git history.
    _reject_credentials(doc, data["command"], env)
    return Job(
        id=data["id"],
        path=path,
        blob=blob,
        command=tuple(data["command"]),
        description=data.get("description"),
        timeout_seconds=data.get("timeout_seconds"),
        cwd=normal,
        env=tuple(sorted(env.items())),
        labels=tuple(data.get("labels", ())),
        runs_on=tuple(sorted(data.get("runs_on", ()))),
        retries=data.get("retries", 0),
        idempotent=data.get("idempotent", False),
    )


def _reject_credentials(doc: config.Document, command: list[str], env: dict[str, str]) -> None:
    from mergegate.redaction import find_credential

    for index, arg in enumerate(command):
        shape = find_credential(arg)
        if shape is not None:
            raise doc.error(
                ("command", index),
                f"field 'command': argument {index} looks like a {shape}; credentials do not "
                "belong in a job file",
                hint="pass secrets through the runner's environment and the policy's secret_env",
            )
    for name, value in env.items():
        shape = find_credential(value) or find_credential(f"{name}={value}")
        if shape is not None:
            raise doc.error(
                ("env", name),
                f"field 'env.{name}': value looks like a {shape}; credentials do not belong in a "
                "job file",
                hint="pass secrets through the runner's environment and the policy's secret_env",
            )


def check_unique_ids(paths: list[str]) -> dict[str, str]:
    """Map each job path that shares its id with another file to why it is refused."""
    by_id: dict[str, list[str]] = {}
    for path in paths:
        by_id.setdefault(job_stem(path), []).append(path)
    problems: dict[str, str] = {}
    for job_id, same in by_id.items():
        if len(same) > 1:
            for path in same:
                others = ", ".join(p for p in sorted(same) if p != path)
                problems[path] = f"job id '{job_id}' is not unique: also {others}"
    return problems


__all__ = [
    "JOBS_DIR",
    "ConfigError",
    "Job",
    "check_unique_ids",
    "forbidden_env_name",
    "is_job_path",
    "parse_job",
]
