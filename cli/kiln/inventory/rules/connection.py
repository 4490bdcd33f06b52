"""Connection variables that run commands on the controller: allowed, but shown as warnings.

An inventory is code as much as data: a `ProxyCommand` in `ansible_ssh_common_args` runs a shell
command on the machine running kiln, `ansible_connection: local` runs every task of that host
there, and a Python interpreter named for a local connection is a program on the controller.
All are legitimate (a bastion's ProxyCommand, a controller that is also the Slurm head), so
`kiln validate` lets them through as warnings naming the key and the hosts, for an operator
reviewing an inventory they did not write.
"""

from __future__ import annotations

from kiln.inventory.context import InventoryContext
from kiln.inventory.findings import FindingCollector, Origin

SSH_ARG_KEYS = ("ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args")
SHOWN_HOSTS = 5


def _names(hosts: list[str]) -> str:
    more = len(hosts) - SHOWN_HOSTS
    return ", ".join(hosts[:SHOWN_HOSTS]) + (f" and {more} more" if more > 0 else "")


def commands_run_on_the_controller(ctx: InventoryContext, out: FindingCollector) -> None:
    """One warning per key and place it is written, naming the hosts that inherit it."""
    found: dict[tuple[str, Origin | None, str], list[str]] = {}
    for host in ctx.hosts.values():
        local = str(getattr(host.vars.get("ansible_connection"), "value", "")) == "local"
        for key in SSH_ARG_KEYS:
            located = host.vars.get(key)
            if located is not None and "proxycommand" in str(located.value).lower():
                what = f"{key} holds a ProxyCommand, a command run on the controller"
                found.setdefault((key, located.origin, what), []).append(host.name)
        if local:
            located = host.vars["ansible_connection"]
            what = "ansible_connection is 'local': this host's tasks run on the controller"
            found.setdefault(("ansible_connection", located.origin, what), []).append(host.name)
            python = host.vars.get("ansible_python_interpreter")
            if python is not None:
                what = (
                    f"ansible_python_interpreter {str(python.value)!r} with a local connection "
                    "is a program run on the controller"
                )
                found.setdefault(("ansible_python_interpreter", python.origin, what), []).append(
                    host.name
                )
    for (key, origin, what), hosts in found.items():
        out.warning(
            f"{what} (host{'s' if len(hosts) > 1 else ''} {_names(hosts)})",
            origin=origin,
            key=key,
            hint="allowed; make sure you trust whoever wrote it: kiln runs it as you",
        )
