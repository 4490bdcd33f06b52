"""Run one playbook through ansible-runner. The only module in kiln that imports ansible_runner.

Every path handed to ansible-runner is absolute; the process gets an allow-listed environment
(not kiln's whole os.environ) plus the ANSIBLE_* settings kiln chooses; events go to an
EventRecorder that only records. Callers read status, rc and stats from the PlaybookResult;
`stats is None` means the play never reached its recap.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_runner.interface import init_runner
from ansible_runner.utils import get_callback_dir

from kiln.errors import EnvironmentProblem
from kiln.paths import PLAYBOOKS_DIR
from kiln.runner.events import EventRecorder, HostResult

# Taken from kiln's own environment when present; nothing else is passed through.
ENV_ALLOW = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "SSH_AUTH_SOCK", "TMPDIR", "USER")
# ansible-vault's own settings pass through as Ansible users expect. When kiln was given vault
# ids (kiln.inventory.vault), it sets ANSIBLE_VAULT_IDENTITY_LIST to all of them, the
# environment's password file included, and that file's own variable is dropped.
VAULT_ENV = ("ANSIBLE_VAULT_IDENTITY_LIST", "ANSIBLE_VAULT_PASSWORD_FILE")
ENV_ALLOW_PREFIXES = ("KILN_",)
DEFAULT_FORKS = 25
# ServerAlive: a host that hangs with a connection open (a frozen kernel, a cut link) stops
# answering on the shared master connection, where no connect timeout applies and TCP would
# wait for many minutes; after 3 unanswered probes 10 s apart ssh exits 255, and Ansible's
# retries then call the host unreachable instead of holding the rollout.
SSH_ARGS = (
    "-o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=10 -o ServerAliveCountMax=3"
)
# kiln's stdout callback for ansible-runner: its awx_display less the per-host-task events and
# payloads kiln's recorder never reads (see the module's docstring).
CALLBACK_DIR = Path(__file__).resolve().parent / "callback"
# kiln's strategies: Ansible's linear (or mitogen's) with one forked worker per slot per task
# instead of one per host-task (kiln.strategy.batching). Plugin shims beside the playbooks, so a
# worker controller finds them in the project it is sent.
STRATEGY_DIR = PLAYBOOKS_DIR / "strategy_plugins"
# The directory holding the kiln package this process runs. ansible-playbook gets it first on
# PYTHONPATH, so the filter and strategy plugins import this same kiln, never another copy
# installed beside Ansible.
KILN_SOURCE = Path(__file__).resolve().parents[2]
# Settings that only make sense on this controller: a worker controller's ansible-runner keeps its
# own strategy, callback and installed kiln.
LOCAL_ONLY = (
    "ANSIBLE_STRATEGY",
    "ANSIBLE_STRATEGY_PLUGINS",
    "AWX_LIB_DIRECTORY",
    "KILN_RUNNER_CALLBACK",
    "PYTHONPATH",
)


@dataclass(slots=True)
class PlaybookRequest:
    """Everything one ansible-runner process needs (one stage; later, one shard of a stage)."""

    playbook: Path
    inventory: Path
    private_data_dir: Path
    ident: str
    fact_cache: Path
    limit: str | None = None
    check: bool = False
    diff: bool = False
    forks: int = DEFAULT_FORKS
    extravars: dict[str, Any] = field(default_factory=dict)
    envvars: dict[str, str] = field(default_factory=dict)  # extra ANSIBLE_*/KILN_* set by kiln


@dataclass(slots=True)
class PlaybookResult:
    status: str  # successful | failed | timeout | canceled | error
    rc: int | None
    stats: dict[str, dict[str, int]] | None  # None: the play never reached its recap
    hosts: dict[str, HostResult]
    batches: int
    no_hosts_remaining: bool
    artifact_data: dict[str, Any]
    artifact_dir: Path
    # On a worker controller: the exit status of the command that reached it (ssh), and when
    # kiln last wrote it a heartbeat (time.monotonic(); its job's lease runs from there).
    worker_rc: int | None = None
    heartbeat_at: float | None = None

    @property
    def reached_recap(self) -> bool:
        return self.stats is not None


def mitogen_strategy_dir() -> Path | None:
    """mitogen's strategy plugins where the package is installed (KILN_MITOGEN=0 turns it off).

    Chosen by measurement over real SSH (bench/engine_ssh.py, 100 hosts, docs/scale.md): with
    kiln's batched workers it took 0.40x stock Ansible's controller CPU and 0.21x its wall time,
    against 0.57x and 0.95x for batched workers over Ansible's ssh connection (0.34x since the
    workers' copies and mitogen bindings got cheaper). kiln uses it when present and does not
    require it.
    """
    if os.environ.get("KILN_MITOGEN", "1") == "0":
        return None
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or not spec.submodule_search_locations:
        return None
    strategy = Path(next(iter(spec.submodule_search_locations))) / "plugins" / "strategy"
    return strategy if strategy.is_dir() else None


def runner_callback() -> Path:
    """ansible-runner's own awx_display.py, which kiln's callback (CALLBACK_DIR) extends."""
    return Path(get_callback_dir()) / "awx_display.py"


def batch_workers() -> bool:
    """kiln's batched workers are on unless KILN_BATCH_WORKERS=0."""
    return os.environ.get("KILN_BATCH_WORKERS", "1") != "0"


def strategy_settings() -> dict[str, str]:
    """The strategy plays run with: kiln's batched workers (KILN_BATCH_WORKERS=0 turns them off),
    over mitogen's linear strategy where mitogen is installed, else over Ansible's.

    Batched workers cut the controller's CPU per host-task by about two thirds (bench/
    scale_cost.py, docs/scale.md); with both off, Ansible's own linear strategy runs.
    """
    mitogen = mitogen_strategy_dir()
    if batch_workers():
        name = "kiln_mitogen_linear" if mitogen else "kiln_linear"
        return {"ANSIBLE_STRATEGY_PLUGINS": str(STRATEGY_DIR), "ANSIBLE_STRATEGY": name}
    if mitogen:
        return {"ANSIBLE_STRATEGY_PLUGINS": str(mitogen), "ANSIBLE_STRATEGY": "mitogen_linear"}
    return {}


def ansible_settings(request: PlaybookRequest) -> dict[str, str]:
    """The ANSIBLE_* settings kiln runs with (documented in docs, asserted in unit tests)."""
    return {
        "ANSIBLE_CONFIG": str(request.private_data_dir / "ansible.cfg"),
        "ANSIBLE_FORKS": str(request.forks),
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_SSH_ARGS": SSH_ARGS,
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_GATHERING": "smart",
        "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "86400",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_DISPLAY_SKIPPED_HOSTS": "False",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
        # Keep one failed result's payload bounded in the event stream.
        "MAX_EVENT_RES": "100000",
        # ansible-runner loads its stdout callback from here: one event per host-task, not two.
        "AWX_LIB_DIRECTORY": str(CALLBACK_DIR),
        "KILN_RUNNER_CALLBACK": str(runner_callback()),
        "PYTHONPATH": str(KILN_SOURCE),
        **strategy_settings(),
        **request.envvars,
    }


def ansible_bin_dir(path: str | None = None) -> Path:
    """Where ansible-playbook is: on PATH, else beside kiln's own interpreter (a venv)."""
    found = shutil.which("ansible-playbook", path=path)
    if found:
        return Path(found).parent
    beside = Path(sys.executable).parent
    if (beside / "ansible-playbook").is_file():
        return beside
    raise EnvironmentProblem(
        "ansible-playbook not found on PATH nor beside kiln's Python",
        hint="install kiln with its dependencies (pip install kiln pulls in ansible)",
    )


def allowed_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = dict(os.environ if environ is None else environ)
    env = {
        key: value
        for key, value in environ.items()
        if key in ENV_ALLOW or key in VAULT_ENV or key.startswith(ENV_ALLOW_PREFIXES)
    }
    if not (env.get("LANG") or env.get("LC_ALL")):
        env["LANG"] = "C.UTF-8"  # ansible-core refuses a non-UTF-8 locale
    bin_dir = str(ansible_bin_dir(env.get("PATH", "")))
    if bin_dir not in env.get("PATH", "").split(os.pathsep):
        env["PATH"] = os.pathsep.join(filter(None, (bin_dir, env.get("PATH"))))
    return env


def runner_kwargs(request: PlaybookRequest, recorder: EventRecorder) -> dict[str, Any]:
    """The exact arguments given to ansible-runner."""
    flags = (("--check", request.check), ("--diff", request.diff))
    cmdline = " ".join(flag for flag, wanted in flags if wanted)
    kwargs: dict[str, Any] = {
        "private_data_dir": str(request.private_data_dir),
        "playbook": str(request.playbook),
        "inventory": str(request.inventory),
        "ident": request.ident,
        "envvars": ansible_settings(request),
        "extravars": dict(request.extravars),
        "forks": request.forks,
        "settings": {
            "fact_cache_type": "jsonfile",
            "fact_cache": str(request.fact_cache),
            "suppress_ansible_output": True,
        },
        "quiet": True,
        "rotate_artifacts": 0,
        "event_handler": recorder,
    }
    if request.limit:
        kwargs["limit"] = request.limit
    if cmdline:
        kwargs["cmdline"] = cmdline
    return kwargs


def _restrict_env(
    runner_env: dict[str, str], environ: dict[str, str], vault_ids: str | None = None
) -> dict[str, str]:
    """ansible-runner seeds the job's env with os.environ; keep only the allow-list plus what
    ansible-runner and kiln set themselves (anything that differs from kiln's environment)."""
    added = {key: value for key, value in runner_env.items() if environ.get(key) != value}
    # Kept even when kiln's own environment already has the same PYTHONPATH.
    env = {**allowed_environment(environ), **added, "PYTHONPATH": str(KILN_SOURCE)}
    if vault_ids:
        env["ANSIBLE_VAULT_IDENTITY_LIST"] = vault_ids
        env.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)  # already one of the ids
    return env


def prepare_dirs(request: PlaybookRequest) -> None:
    for path in (request.playbook, request.inventory, request.private_data_dir):
        if not path.is_absolute():
            raise ValueError(f"ansible-runner needs absolute paths, got {path}")
    request.private_data_dir.mkdir(parents=True, exist_ok=True)
    request.fact_cache.mkdir(parents=True, exist_ok=True)
    (request.private_data_dir / "ansible.cfg").write_text(
        "# kiln passes every Ansible setting as ANSIBLE_* environment variables;\n"
        "# this file keeps ~/.ansible.cfg and /etc/ansible/ansible.cfg out, and retries\n"
        "# an SSH connection that fails to connect (exit 255: timed out, refused, reset)\n"
        "# 3 more times (after 0, 1 and 3 s) before the host is called unreachable.\n"
        "[defaults]\ntimeout = 30\n[ssh_connection]\nretries = 3\n"
    )


def run_playbook(
    request: PlaybookRequest, recorder: EventRecorder, targets: list[str] | None = None
) -> PlaybookResult:
    """Run one playbook to the end; blocking. `targets` are the hosts the play should reach."""
    prepare_dirs(request)
    runner = init_runner(**runner_kwargs(request, recorder))
    vault_ids = request.envvars.get("ANSIBLE_VAULT_IDENTITY_LIST")
    runner.config.env = _restrict_env(runner.config.env, dict(os.environ), vault_ids)
    runner.run()
    stopped = bool(recorder.no_hosts_remaining and runner.status != "successful")
    return PlaybookResult(
        status=runner.status,
        rc=runner.rc,
        stats=recorder.stats,
        hosts=recorder.host_results(targets or [], stopped=stopped),
        batches=recorder.batches,
        no_hosts_remaining=recorder.no_hosts_remaining,
        artifact_data=recorder.artifact_data,
        artifact_dir=Path(runner.config.artifact_dir),
    )
