"""Light sandbox hosts without Docker: names, addresses, the inventory kiln validates, the
container's command line and what it trusts."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml

from kiln.errors import InvalidInputError
from kiln.inventory import require_valid
from kiln.sandbox import config, light


def test_a_hundred_light_hosts_have_unique_names_and_addresses_on_their_own_subnet() -> None:
    nodes = light.light_nodes(100)
    assert len({n.name for n in nodes}) == len({n.address for n in nodes}) == 100
    light_net = ipaddress.ip_network(light.SUBNET_LIGHT)
    assert all(ipaddress.ip_address(n.address) in light_net for n in nodes)
    assert not light_net.overlaps(ipaddress.ip_network(config.SUBNET))
    assert [n.role for n in nodes].count("controller") == 1 and nodes[0].role == "controller"
    # The most the subnet holds, gateway and broadcast excluded.
    last = ipaddress.ip_address(light.light_nodes(light.MAX_LIGHT)[-1].address)
    assert last in light_net and last != light_net.broadcast_address


def test_names_never_collide_with_the_sandbox_nodes() -> None:
    full = {n.name for n in config.nodes(config.MAX_NODES)}
    assert not full & {n.name for n in light.light_nodes(light.MAX_LIGHT)}


def test_the_inventory_is_a_valid_kiln_inventory_with_host_key_checking_on(tmp_path) -> None:
    paths = config.Paths(tmp_path, str(tmp_path))
    nodes = light.light_nodes(5)
    text = light.render_inventory(nodes, paths)
    (tmp_path / "hosts.yml").write_text(text)
    cluster = require_valid(tmp_path / "hosts.yml")
    assert cluster.groups["kiln_controllers"] == (nodes[0].name,)
    assert len(cluster.groups["kiln_compute"]) == 4
    data = yaml.safe_load(text)["all"]["vars"]
    assert "StrictHostKeyChecking=yes" in data["ansible_ssh_common_args"]
    assert (
        f"UserKnownHostsFile={tmp_path / 'sandbox/light/known_hosts'}"
        in (data["ansible_ssh_common_args"])
    )
    assert data["ansible_ssh_private_key_file"] == str(paths.private_key)


def test_a_light_host_runs_sshd_alone_with_a_fresh_host_key_it_publishes(tmp_path: Path) -> None:
    node = light.light_nodes(1)[0]
    argv = light.run_command(node, "kiln-node:abc", "ssh-ed25519 AAAA kiln-sandbox", tmp_path)
    assert argv[argv.index("--ip") + 1] == node.address
    assert f"{light.LABEL}={config.INSTANCE}" in argv
    assert f"{tmp_path}:/kiln-hostkeys" in argv
    assert "KILN_AUTHORIZED_KEY=ssh-ed25519 AAAA kiln-sandbox" in argv
    # No systemd, no extra privileges: sshd is PID 1.
    assert "--privileged" not in argv and "SYS_ADMIN" not in argv
    script = argv[-1]
    assert script.index("rm -f /etc/ssh/ssh_host_*") < script.index("ssh-keygen")
    assert script.strip().splitlines()[-1].startswith("exec /usr/sbin/sshd -D")
    # Published by rename, so a reader never sees half a key.
    assert "mv " in script and ".tmp" in script


@pytest.mark.parametrize("count", [0, light.MAX_LIGHT + 1])
def test_a_count_out_of_range_is_refused_before_docker_is_touched(count, monkeypatch) -> None:
    monkeypatch.setattr(light, "require_docker", lambda: pytest.fail("docker was touched"))
    with pytest.raises(InvalidInputError, match="light hosts must be between 1"):
        light.up(count, config.paths())
