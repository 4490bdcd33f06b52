"""The sandbox without Docker: inventory rendering, docker command lines, known_hosts format."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kiln.errors import EnvironmentProblem, InvalidInputError
from kiln.inventory import load_cluster
from kiln.sandbox import cluster, config, docker, inventory, releases, ssh

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def default_paths(monkeypatch: pytest.MonkeyPatch) -> config.Paths:
    monkeypatch.delenv("KILN_HOME", raising=False)
    return config.paths()


def _hosts(count: int) -> dict:
    return yaml.safe_load(inventory.render_hosts(count))


@pytest.mark.parametrize("count", [1, 2, 5, 12])
def test_hosts_has_the_controller_and_n_compute_nodes(count: int) -> None:
    groups = _hosts(count)["all"]["children"]
    assert list(groups["kiln_controllers"]["hosts"]) == ["kiln-ctl"]
    compute = groups["kiln_compute"]["hosts"]
    assert list(compute) == [f"kiln-node{i:02d}" for i in range(1, count + 1)]
    assert groups["kiln_controllers"]["hosts"]["kiln-ctl"]["ansible_host"] == "172.31.250.10"
    assert compute[f"kiln-node{count:02d}"] == {
        "ansible_host": f"172.31.250.{10 + count}",
        "kiln_rack": "sandbox",
        "kiln_gpu_model": "none",
        "kiln_gpu_count": 0,
    }


def test_group_vars_use_tilde_paths_with_the_default_state_dir(default_paths) -> None:
    text = inventory.render_group_vars(default_paths)
    assert yaml.safe_load(text) == {
        "kiln_cluster_name": "sandbox",
        "kiln_os": "debian-13",
        "kiln_versions": {"driver_branch": 580, "cuda": "13.0", "nccl": "2.27.7", "slurm": "24.11"},
        "kiln_slurm": {"cgroup": False, "quarantine_new_nodes": True},
        "base_hostname_manage": False,
        "base_hosts_unsafe_writes": True,
        "base_chrony_start": False,
        "kiln_health": {"skip": ["time_sync"]},
        "ansible_user": "root",
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_pipelining": True,
        "ansible_ssh_private_key_file": "~/.kiln/sandbox/id_ed25519",
        "ansible_ssh_common_args": (
            "-o UserKnownHostsFile=~/.kiln/sandbox/known_hosts -o StrictHostKeyChecking=yes"
        ),
    }


def test_group_vars_use_absolute_paths_for_another_kiln_home(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "state"))
    paths = config.paths()
    assert paths.private_key == tmp_path / "state" / "sandbox" / "id_ed25519"
    values = yaml.safe_load(inventory.render_group_vars(paths))
    assert values["ansible_ssh_private_key_file"] == f"{tmp_path}/state/sandbox/id_ed25519"
    assert (
        f"UserKnownHostsFile={tmp_path}/state/sandbox/known_hosts"
        in (values["ansible_ssh_common_args"])
    )


def test_kiln_home_equal_to_the_default_still_writes_tilde(monkeypatch) -> None:
    monkeypatch.setenv("KILN_HOME", "~/.kiln")
    assert config.paths().display_state_dir == "~/.kiln"


@pytest.mark.parametrize("count", [1, 2, 7])
def test_rendered_files_are_safe_yaml_documents(count: int, default_paths) -> None:
    for name, text in inventory.render(count, default_paths).items():
        assert text.startswith("---\n"), name
        assert "{{" not in text and "{%" not in text, name
        assert all(len(line) <= 100 for line in text.splitlines()), name


def test_committed_sandbox_inventory_equals_the_two_node_rendering(default_paths) -> None:
    committed = REPO / "inventories" / "sandbox"
    for relative, text in inventory.render(2, default_paths).items():
        assert (committed / relative).read_text() == text, relative


def test_write_creates_the_inventory_dir(tmp_path, default_paths) -> None:
    inventory.write(tmp_path / "inv", 3, default_paths, releases.RELEASES["debian-12"])
    assert (tmp_path / "inv" / "hosts.yml").read_text() == inventory.render_hosts(3)
    assert (tmp_path / "inv" / "group_vars" / "all.yml").is_file()


@pytest.mark.parametrize("release", list(releases.RELEASES.values()), ids=lambda r: r.os)
def test_each_release_writes_an_inventory_kiln_validate_accepts(release, tmp_path, default_paths):
    """The versions a release's sandbox declares are what it ships (Slurm) and what its platform
    and the compatibility table accept, without a warning."""
    inventory.write(tmp_path / "inv", 2, default_paths, release)
    result = load_cluster(tmp_path / "inv")
    assert result.errors == [] and result.warnings == []
    assert result.cluster.versions.slurm == release.slurm


def test_the_release_comes_from_the_option_then_the_environment_then_the_default():
    assert releases.chosen(environ={}).os == "debian-13"
    assert releases.chosen(environ={"KILN_SANDBOX_OS": "debian-12"}).suite == "bookworm"
    assert releases.chosen("debian-13", environ={"KILN_SANDBOX_OS": "debian-12"}).suite == "trixie"
    with pytest.raises(InvalidInputError, match="debian-13, debian-12, not 'ubuntu-24.04'"):
        releases.chosen("ubuntu-24.04", environ={})


def test_run_command_boots_systemd_with_the_flags_that_work_without_privileged() -> None:
    node = config.Node("kiln-node01", "172.31.250.11", "compute")
    assert cluster.run_command(node, "kiln-node:abc") == [
        "run", "--detach",
        "--name", "kiln-node01",
        "--hostname", "kiln-node01",
        "--network", "kiln-sandbox",
        "--ip", "172.31.250.11",
        "--label", "kiln.sandbox=kiln",
        "--label", "kiln.sandbox.role=compute",
        "--label", f"kiln.sandbox.flags={cluster.FLAGS_DIGEST}",
        "--cap-add", "SYS_ADMIN",
        "--cap-add", "SYS_NICE",
        "--security-opt", "seccomp=unconfined",
        "--security-opt", "systempaths=unconfined",
        "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
        "--tmpfs", "/run",
        "--tmpfs", "/run/lock",
        "--stop-signal", "SIGRTMIN+3",
        "--env", "container=docker",
        "kiln-node:abc",
        "/lib/systemd/systemd",
    ]  # fmt: skip
    assert "--privileged" not in cluster.run_command(node, "x")


def test_network_has_the_fixed_subnet_and_label() -> None:
    assert cluster.network_create_command() == [
        "network", "create", "--driver", "bridge",
        "--subnet", "172.31.250.0/24", "--gateway", "172.31.250.1",
        "--label", "kiln.sandbox=kiln", "kiln-sandbox",
    ]  # fmt: skip


def test_known_hosts_line_names_hostname_and_address() -> None:
    node = config.Node("kiln-ctl", "172.31.250.10", "controller")
    line = ssh.known_hosts_line(node, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIexample")
    assert line == "kiln-ctl,172.31.250.10 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIexample"


def test_ssh_command_keeps_host_key_checking_on(tmp_path) -> None:
    node = config.Node("kiln-ctl", "172.31.250.10", "controller")
    cmd = ssh.ssh_command(node, tmp_path / "key", tmp_path / "known_hosts")
    assert cmd[0] == "ssh" and cmd[-2:] == ["root@172.31.250.10", "true"]
    assert "StrictHostKeyChecking=yes" in cmd and "BatchMode=yes" in cmd
    assert f"UserKnownHostsFile={tmp_path / 'known_hosts'}" in cmd
    assert not any("StrictHostKeyChecking=no" in arg for arg in cmd)


def test_missing_docker_is_an_environment_problem(monkeypatch) -> None:
    monkeypatch.setattr(docker.shutil, "which", lambda name: None)
    with pytest.raises(EnvironmentProblem) as raised:
        docker.require_docker()
    assert raised.value.exit_code == 3
    assert "ensure-docker.sh" in (raised.value.hint or "")


def test_an_air_gapped_sandbox_has_an_internal_network_and_a_mirror_serving_the_bundle(
    tmp_path, default_paths
) -> None:
    from kiln.sandbox import mirror

    assert "--internal" in cluster.network_create_command(internal=True)
    assert "--internal" not in cluster.network_create_command()
    command = mirror.run_command(tmp_path / "bundle", "kiln-node-base:abc")
    assert command[command.index("--ip") + 1] == "172.31.250.5"
    assert f"{tmp_path / 'bundle'}:/srv/bundle:ro" in command
    source = command[command.index(f"{tmp_path / 'bundle'}:/srv/bundle:ro") + 2]
    assert source == f"{REPO / 'cli' / 'kiln'}:/opt/kiln-src/kiln:ro"  # kiln's own server
    serve = ["python3", "-m", "kiln.artifacts.serve", "/srv/bundle", "--port", "8080"]
    assert command[-7:] == ["kiln-node-base:abc", *serve]
    with pytest.raises(InvalidInputError, match="is not a kiln bundle"):
        mirror.ensure_mirror(tmp_path, "kiln-node:abc")
    inventory.write(tmp_path / "inv", 2, default_paths, releases.RELEASES["debian-13"],
                    mirror.mirror_url("172.31.250.5"))  # fmt: skip
    result = load_cluster(tmp_path / "inv")
    assert result.errors == [] and result.warnings == []
    assert result.cluster.mirror.url == "http://172.31.250.5:8080" and result.cluster.mirror.offline


def test_a_container_made_with_other_flags_is_recreated_not_reused(monkeypatch) -> None:
    # Made by an older kiln (without SYS_NICE, its users' jobs could not be bound to CPUs):
    # replaced rather than reused; one made with today's flags is reused.
    calls: list[list[str]] = []
    monkeypatch.setattr(cluster, "docker", lambda argv, **_: calls.append(argv))
    monkeypatch.setattr(cluster, "image_id", lambda tag: "sha256:same")
    node = config.Node("kiln-node01", "172.31.250.11", "compute")
    old = cluster.ContainerState(
        node.name, node.address, "running", "sha256:same", "compute", flags=""
    )
    assert cluster.ensure_container(node, "kiln-node:abc", old) == "recreated"
    assert calls[0] == ["rm", "--force", node.name]
    assert "SYS_NICE" in calls[1]
    current = cluster.ContainerState(node.name, node.address, "running", "sha256:same", "compute")
    calls.clear()
    assert cluster.ensure_container(node, "kiln-node:abc", current) == "reused"
    assert calls == []


def test_a_container_left_with_a_cpu_limit_is_recreated_not_reused(monkeypatch) -> None:
    # A test that throttles a node (`docker update --cpu-quota`) and is killed before it lifts
    # the limit leaves it in the container's configuration, across restarts: reused, that node
    # then reads 5 % of its GEMM rate in every later burn-in and is drained (CI, stop 46).
    calls: list[list[str]] = []
    monkeypatch.setattr(cluster, "docker", lambda argv, **_: calls.append(argv))
    monkeypatch.setattr(cluster, "image_id", lambda tag: "sha256:same")
    node = config.Node("kiln-node02", "172.31.250.12", "compute")
    host_config = {"CpuQuota": 5000, "CpuPeriod": 100000, "NanoCpus": 0, "CpusetCpus": "",
                   "Memory": 0}  # fmt: skip
    assert cluster.resource_limits(host_config) == ["CPU quota 5000/100000"]
    throttled = cluster.ContainerState(
        node.name, node.address, "exited", "sha256:same", "compute",
        limits=tuple(cluster.resource_limits(host_config)),
    )  # fmt: skip
    assert cluster.ensure_container(node, "kiln-node:abc", throttled) == "recreated"
    assert calls[0] == ["rm", "--force", node.name] and calls[1][0] == "run"
    lifted = {**host_config, "CpuQuota": -1}  # what `docker update --cpu-quota -1` leaves
    assert cluster.resource_limits(lifted) == []
    limits = {"CpuQuota": 0, "CpuPeriod": 0, "NanoCpus": 1500000000, "CpusetCpus": "0",
              "Memory": 1 << 30}  # fmt: skip
    assert cluster.resource_limits(limits) == ["1.5 CPUs", "CPUs 0", "memory 1024 MiB"]
