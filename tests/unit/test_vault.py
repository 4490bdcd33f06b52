"""ansible-vault through kiln: the options and variables, decryption while validating, the
munge key check, and no secret (plain or encrypted) in a run record, which is private.

tests/fixtures/vault/inventory is a real ansible-vault inventory (made with
`ansible-vault encrypt_string` / `encrypt` and the password in tests/fixtures/vault/password):
a vaulted kiln_munge_key (group_vars/all/main.yml:3), a vaulted kiln_bmc_password
(host_vars/gpu01.yml:3) and a whole encrypted group_vars/kiln_compute.yml holding
ansible_become_password.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_runner import run_locked

from kiln.app import main
from kiln.errors import ExitCode, InvalidInputError
from kiln.inventory import load_cluster, require_valid
from kiln.inventory.redact import REDACTED, redact, secret_keys, secret_strings
from kiln.inventory.vault import VaultConfig
from kiln.plan import PlanOptions, make_plan
from kiln.plan.stages import Stage
from kiln.runner import engine, stream
from vault_env import no_vault_env  # noqa: F401  (autouse: applies here)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vault"
INVENTORY = FIXTURE / "inventory"
PASSWORD = FIXTURE / "password"
WRONG = FIXTURE / "wrong-password"
SMOKE = FIXTURE.parent / "engine" / "smoke.yml"
PLAINTEXTS = (
    "bmc-secret-gpu01",
    "become-secret-compute",
    (FIXTURE / "munge-key.b64").read_text().strip(),
)


def run_kiln(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


def findings(stdout: str) -> set[tuple[str, int, str | None]]:
    return {(f["file"], f["line"], f["key"]) for f in json.loads(stdout)["findings"]}


# --- options and variables ----------------------------------------------------------------------


def test_ids_come_from_options_then_the_environment(tmp_path):
    other = tmp_path / "other"
    other.write_text("x\n")
    config = VaultConfig.build(
        [f"prod@{PASSWORD}"],
        other,
        {
            "ANSIBLE_VAULT_IDENTITY_LIST": f"dev@{WRONG}",
            "ANSIBLE_VAULT_PASSWORD_FILE": str(PASSWORD),
        },
    )
    assert config.identities == (
        f"prod@{PASSWORD}",
        f"default@{other}",
        f"dev@{WRONG}",
        f"default@{PASSWORD}",
    )
    assert config.env() == {"ANSIBLE_VAULT_IDENTITY_LIST": ",".join(config.identities)}
    assert VaultConfig.build([], None, {}).env() == {}


@pytest.mark.parametrize("source", ["prompt", "dev@prompt", "missing-file"])
def test_a_prompt_or_a_missing_file_is_refused_with_exit_2(source):
    with pytest.raises(InvalidInputError) as refused:
        VaultConfig.build([source], None, {})
    assert refused.value.exit_code == ExitCode.INVALID_INPUT


def test_the_engine_hands_ansible_the_vault_ids_and_no_prompt(tmp_path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(PASSWORD))
    vault = VaultConfig.build([f"prod@{PASSWORD}"], None, dict(os.environ))
    started = []

    def init_runner(**kwargs):
        env = {**os.environ, **kwargs["envvars"]}
        runner = SimpleNamespace(
            config=SimpleNamespace(env=env, artifact_dir=str(tmp_path)),
            run=lambda: None,
            status="successful",
            rc=0,
            kwargs=kwargs,
        )
        started.append(runner)
        return runner

    monkeypatch.setattr(engine, "init_runner", init_runner)
    inventory = tmp_path / "hosts.json"
    inventory.write_text("{}")
    request = engine.PlaybookRequest(
        playbook=SMOKE,
        inventory=inventory,
        private_data_dir=tmp_path / "pdd",
        ident="r",
        fact_cache=tmp_path / "fc",
        envvars=vault.env(),
    )
    from kiln.runner.events import EventRecorder

    engine.run_playbook(request, EventRecorder("base"))
    (runner,) = started
    env = runner.config.env
    assert env["ANSIBLE_VAULT_IDENTITY_LIST"] == f"prod@{PASSWORD},default@{PASSWORD}"
    assert "ANSIBLE_VAULT_PASSWORD_FILE" not in env  # it is one of the ids already
    assert "--ask-vault-pass" not in runner.kwargs.get("cmdline", "")


def test_a_worker_gets_the_password_files_and_the_record_keeps_no_copy(tmp_path):
    vault = VaultConfig.build([f"prod@{PASSWORD}"], None, {})
    inventory = tmp_path / "hosts.json"
    inventory.write_text("{}")
    pdd = tmp_path / "pdd"
    request = engine.PlaybookRequest(
        playbook=SMOKE,
        inventory=inventory,
        private_data_dir=pdd,
        ident="r",
        fact_cache=tmp_path / "fc",
        envvars=vault.env(),
    )
    kwargs = stream.streamed_kwargs(request, "/remote/job")
    assert kwargs["envvars"]["ANSIBLE_VAULT_IDENTITY_LIST"] == "prod@/remote/job/kiln_ship/vault-0"
    assert (pdd / "kiln_ship" / "vault-0").read_text() == PASSWORD.read_text()
    stream._unship_secrets(pdd)
    assert not (pdd / "kiln_ship" / "vault-0").exists() and not (pdd / "inventory").exists()


# --- validate -----------------------------------------------------------------------------------


def test_validate_decrypts_with_the_password_file(capsys):
    code, stdout, stderr = run_kiln(
        capsys, "validate", "--vault-password-file", str(PASSWORD), str(INVENTORY)
    )
    assert code == 0, stderr
    for secret in (*PLAINTEXTS, "$ANSIBLE_VAULT"):
        assert secret not in stdout + stderr


def test_validate_honours_the_environment(capsys, monkeypatch):
    monkeypatch.setenv("ANSIBLE_VAULT_IDENTITY_LIST", f"fixture@{PASSWORD}")
    code, _, stderr = run_kiln(capsys, "validate", str(INVENTORY))
    assert code == 0, stderr


def test_without_a_password_an_encrypted_file_is_named(capsys):
    code, stdout, _ = run_kiln(capsys, "validate", "--json", str(INVENTORY))
    assert code == 2
    assert findings(stdout) == {("group_vars/kiln_compute.yml", 1, None)}
    (finding,) = json.loads(stdout)["findings"]
    assert "encrypted with ansible-vault" in finding["message"]


def test_a_wrong_password_reports_every_value_with_file_and_line(capsys):
    code, stdout, stderr = run_kiln(
        capsys, "validate", "--json", "--vault-id", f"x@{WRONG}", str(INVENTORY)
    )
    assert code == 2
    assert findings(stdout) == {
        ("group_vars/all/main.yml", 3, "kiln_munge_key"),
        ("host_vars/gpu01.yml", 3, "kiln_bmc_password"),
        ("group_vars/kiln_compute.yml", 1, None),
    }
    for secret in (*PLAINTEXTS, "$ANSIBLE_VAULT"):
        assert secret not in stdout + stderr


def test_without_a_password_single_vaulted_values_stay_opaque(tmp_path):
    copy = tmp_path / "inventory"
    import shutil

    shutil.copytree(INVENTORY, copy)
    (copy / "group_vars" / "kiln_compute.yml").unlink()
    result = load_cluster(copy)
    assert result.ok, result.findings
    assert result.cluster.node("gpu01").hostvars["kiln_bmc_password"].plaintext is None


@pytest.mark.parametrize("key, problem", [("c2hvcnQ=", "5 bytes"), ("not base64!", "not base64")])
def test_a_declared_munge_key_must_be_base64_of_32_to_1024_bytes(tmp_path, key, problem):
    import shutil

    copy = tmp_path / "inventory"
    shutil.copytree(INVENTORY, copy)
    vault = VaultConfig.build([str(PASSWORD)], None, {})
    ciphertext = vault.encrypt(key).replace("\n", "\n  ")
    main_yml = copy / "group_vars" / "all" / "main.yml"
    main_yml.write_text(
        f"---\nkiln_cluster_name: vaulted\nkiln_munge_key: !vault |\n  {ciphertext}\n"
    )
    result = load_cluster(copy, vault)
    (finding,) = result.errors
    assert finding.key == "kiln_munge_key" and problem in finding.message
    assert key not in finding.message


# --- redaction ----------------------------------------------------------------------------------


def test_redact_removes_secret_keys_vault_values_ciphertexts_and_known_plaintexts():
    data = {
        "ansible_become_password": "x",
        "kiln_bmc_password": {"__ansible_vault": "$ANSIBLE_VAULT;1.1;AES256\n6162"},
        "nested": [{"msg": "sudo: wrong password hunter22 for root"}],
        "vars": {"site": {"__ansible_vault": "whatever"}},
        "log": "value: $ANSIBLE_VAULT;1.2;AES256;prod\n          3132\n          3334 end",
        "fine": 3,
    }
    assert redact(data, {"hunter22"}) == {
        "ansible_become_password": REDACTED,
        "kiln_bmc_password": REDACTED,
        "nested": [{"msg": f"sudo: wrong password {REDACTED} for root"}],
        "vars": {"site": REDACTED},
        "log": f"value: {REDACTED} end",
        "fine": 3,
    }


def test_secret_strings_are_every_plaintext_and_ciphertext_of_the_inventory():
    cluster = require_valid(INVENTORY, VaultConfig.build([str(PASSWORD)], None, {}))
    found = secret_strings(node.hostvars for node in cluster.nodes)
    assert set(PLAINTEXTS) <= found
    assert any(text.startswith("$ANSIBLE_VAULT;1.2;AES256;fixture") for text in found)


def test_every_value_of_a_whole_encrypted_file_is_secret_to_the_records():
    """group_vars/kiln_compute.yml is encrypted whole: besides ansible_become_password (a
    secret key) it holds kiln_bmc_user: operator. kiln reads it as a plain string; the records
    redact it by key and by text."""
    cluster = require_valid(INVENTORY, VaultConfig.build([str(PASSWORD)], None, {}))
    gpu02 = cluster.node("gpu02").hostvars
    assert gpu02["kiln_bmc_user"] == "operator" and isinstance(gpu02["kiln_bmc_user"], str)
    assert cluster.node("gpu01").hostvars["kiln_bmc_user"] == "admin"  # host_vars, plain
    hostvars = [node.hostvars for node in cluster.nodes]
    assert "operator" in secret_strings(hostvars) and "admin" not in secret_strings(hostvars)
    assert secret_keys(hostvars) == {
        "kiln_bmc_user", "ansible_become_password", "kiln_munge_key", "kiln_bmc_password",
    }  # fmt: skip
    copy = json.loads(json.dumps({"gpu02": gpu02, "kiln_cluster_name": "vaulted"}, default=str))
    redacted = redact(copy, secret_strings(hostvars), secret_keys(hostvars))
    assert redacted["gpu02"]["kiln_bmc_user"] == REDACTED
    assert redacted["kiln_cluster_name"] == "vaulted"  # a plain file's value stays
    assert redact("ipmitool -U operator failed", secret_strings(hostvars)) == (
        f"ipmitool -U {REDACTED} failed"
    )


def test_sealed_values_of_any_type_and_depth_are_redacted():
    from kiln.inventory.yamlfile import SealedInt, seal

    data = seal({"port": 623, "ratio": 0.5, "on": True, "nested": {"names": ["n1", "node-b"]}})
    assert isinstance(data["port"], SealedInt) and data["port"] == 623 and data["on"] is True
    assert redact({"vars": data}) == {
        "vars": {"port": REDACTED, "ratio": REDACTED, "on": True,
                 "nested": {"names": [REDACTED, REDACTED]}},
    }  # fmt: skip
    assert secret_keys([data]) == {"port", "ratio", "nested"}
    assert secret_strings([data]) == {"node-b"}  # text search: 4 characters and more


# --- a run: refused without a password; private and secret-free with one -----------------------


def _plan(cluster, tmp_path):
    return make_plan(cluster, PlanOptions(stages=(Stage("preflight", str(SMOKE), ""),)), tmp_path)


def test_a_run_with_vaulted_values_and_no_password_is_refused_before_anything(
    tmp_path, monkeypatch
):
    copy = tmp_path / "inventory"
    import shutil

    shutil.copytree(INVENTORY, copy)
    (copy / "group_vars" / "kiln_compute.yml").unlink()
    cluster = require_valid(copy)
    monkeypatch.setattr(engine, "init_runner", lambda **kw: pytest.fail("ansible ran"))
    with pytest.raises(InvalidInputError, match="no vault password"):
        run_locked(_plan(cluster, tmp_path / "state"), home=tmp_path / "state")
    assert not (tmp_path / "state" / "runs").exists()


def test_the_run_record_is_private_and_holds_no_secret(tmp_path, monkeypatch):
    vault = VaultConfig.build([f"fixture@{PASSWORD}"], None, {})
    cluster = require_valid(INVENTORY, vault)
    used = {}

    def init_runner(**kwargs):
        inventory = Path(kwargs["inventory"])
        used["inventory"] = inventory
        used["text"] = inventory.read_text()  # what Ansible reads: the ciphertexts are there
        used["env"] = kwargs["envvars"]
        leak = f"sudo: {PLAINTEXTS[1]} rejected; value $ANSIBLE_VAULT;1.1;AES256\\n6162"
        events = [
            {"event": "playbook_on_play_start", "counter": 1, "event_data": {"play": "p"}},
            {
                "event": "runner_on_failed",
                "counter": 2,
                "event_data": {"host": "gpu01", "task": "t", "res": {"msg": leak}},
            },
            {"event": "playbook_on_stats", "counter": 3, "event_data": {"failures": {"gpu01": 1}}},
        ]

        def run():
            for event in events:
                kwargs["event_handler"](event)

        return SimpleNamespace(
            config=SimpleNamespace(
                env=dict(kwargs["envvars"]), artifact_dir=kwargs["private_data_dir"]
            ),
            run=run,
            status="failed",
            rc=2,
        )

    monkeypatch.setattr(engine, "init_runner", init_runner)
    state = tmp_path / "state"
    result = run_locked(_plan(cluster, state), home=state, vault=vault)
    assert result.exit_code != 0
    assert used["env"]["ANSIBLE_VAULT_IDENTITY_LIST"] == f"fixture@{PASSWORD}"
    assert '"__ansible_vault"' in used["text"] and PLAINTEXTS[1] not in used["text"]
    assert state not in used["inventory"].parents and not used["inventory"].exists()
    record = Path(result.record)
    assert stat.S_IMODE(record.stat().st_mode) == 0o700
    files = [p for p in state.rglob("*") if p.is_file()]
    assert record / "summary.json" in files and record / "shards" in {
        p.parent.parent for p in files
    }
    for path in files:
        text = path.read_text(errors="replace")
        for secret in (*PLAINTEXTS, "$ANSIBLE_VAULT", "become-secret", "operator"):
            assert secret not in text, f"{secret!r} in {path}"
        if record in path.parents:
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
    for path in (p for p in record.rglob("*") if p.is_dir()):
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
    assert REDACTED in (record / "events.jsonl").read_text()
    message = result.to_dict()["stages"][0]["hosts"]["gpu01"]["message"]
    assert PLAINTEXTS[1] not in message and REDACTED in message


@pytest.mark.local
def test_a_vaulted_value_decrypts_in_a_real_play_through_the_environment(tmp_path, monkeypatch):
    """Real ansible-playbook over local hosts: kiln_munge_key, vaulted in group_vars/all, reaches
    the play decrypted with only ANSIBLE_VAULT_PASSWORD_FILE set, and the munge role installs it."""
    import sys

    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    markers = tmp_path / "markers"
    markers.mkdir()
    local = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "kiln_gpu_model": "none",
        "kiln_rack": "r1",
    }
    document = {
        "all": {
            "vars": {"smoke_dir": str(markers)},
            "children": {
                "kiln_controllers": {"hosts": {"n1": {**local, "ansible_host": "127.0.0.2"}}},
                "kiln_compute": {"hosts": {"n2": {**local, "ansible_host": "127.0.0.3"}}},
            },
        }
    }
    (inventory / "hosts.yml").write_text(json.dumps(document))
    main_yml = (INVENTORY / "group_vars" / "all" / "main.yml").read_text()
    (inventory / "group_vars" / "all.yml").write_text(main_yml)
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(PASSWORD))
    vault = VaultConfig.build([], None, dict(os.environ))
    cluster = require_valid(inventory, vault)
    state = tmp_path / "state"
    plan = make_plan(
        cluster, PlanOptions(stages=(Stage("preflight", str(FIXTURE / "decrypt.yml"), ""),)), state
    )
    result = run_locked(plan, home=state, vault=vault)
    assert result.exit_code == 0, result.to_dict()
    key = PLAINTEXTS[2]
    assert {p.name: p.read_text().strip() for p in markers.iterdir()} == {
        "n1.munge": key,
        "n2.munge": key,
    }
    for path in (p for p in state.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        assert key not in text and "$ANSIBLE_VAULT" not in text, path


def _ini_inventory(directory: Path, *, encrypt: bool) -> Path:
    """An INI inventory (hosts), encrypted whole with ansible-vault when `encrypt`."""
    directory.mkdir()
    text = (
        "[all:vars]\nkiln_cluster_name=ini-vaulted\n\n"
        "[kiln_controllers]\nctl01 ansible_host=10.0.0.1\n\n"
        "[kiln_compute]\ngpu01 ansible_host=10.0.0.11 kiln_bmc_user=operator-ini\n\n"
        "[kiln_compute:vars]\nkiln_gpu_model=h100-sxm\n"
    )
    if encrypt:  # unencrypted, kiln refuses a plaintext become password (a test above)
        text += "ansible_become_password=become-ini-secret\n"
    vault = VaultConfig.build([str(PASSWORD)], None, {})
    (directory / "hosts").write_text(vault.encrypt(text) if encrypt else text)
    return directory


def test_every_value_of_a_whole_encrypted_ini_inventory_is_secret_to_the_records(tmp_path):
    """As a whole encrypted YAML file: the INI file's values are plain to kiln and secret to
    the records; its secret key stays a vault value. The same file unencrypted is not secret."""
    vault = VaultConfig.build([str(PASSWORD)], None, {})
    cluster = require_valid(_ini_inventory(tmp_path / "enc", encrypt=True), vault)
    gpu01 = cluster.node("gpu01").hostvars
    assert gpu01["kiln_bmc_user"] == "operator-ini" and gpu01["ansible_host"] == "10.0.0.11"
    hostvars = [node.hostvars for node in cluster.nodes]
    assert {"operator-ini", "10.0.0.11", "become-ini-secret"} <= secret_strings(hostvars)
    assert {"kiln_bmc_user", "ansible_become_password"} <= secret_keys(hostvars)
    assert "become-ini-secret" not in repr(gpu01["ansible_become_password"])  # a vault value
    assert redact("ipmitool -U operator-ini", secret_strings(hostvars)) == f"ipmitool -U {REDACTED}"

    plain = require_valid(_ini_inventory(tmp_path / "plain", encrypt=False))
    assert "operator-ini" not in secret_strings(node.hostvars for node in plain.nodes)
