"""Burn-in's GPU runtime: the torch build the burnin role installs, chosen per GPU architecture
from the compatibility table (a Blackwell B200 needs a CUDA 12.8 build; Hopper keeps its)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kiln.profiles import burnin_runtime, get_profile, load_compat, load_profiles, parse_version
from role_defaults import render_role_defaults

ROOT = Path(__file__).parents[2]
ROLE = ROOT / "playbooks" / "roles" / "burnin"


def test_b200_gets_a_cuda_12_8_build_and_hopper_keeps_its():
    b200 = burnin_runtime("b200")
    assert parse_version(b200.cuda) >= (12, 8)
    assert parse_version(b200.torch) >= (2, 7)  # the first torch with Blackwell kernels
    assert b200.index_url == "https://download.pytorch.org/whl/cu128"
    h100 = burnin_runtime("h100-sxm")
    assert (h100.requirements, h100.cuda) == (["torch==2.5.1"], "12.4")
    assert h100.index_url == "https://download.pytorch.org/whl/cu124"
    assert burnin_runtime("none") == h100  # the table's default, for CPU-only nodes


@pytest.mark.parametrize("profile_id", sorted(p for p, v in load_profiles().items() if v.is_gpu))
def test_every_gpu_gets_a_build_with_kernels_for_its_architecture(profile_id):
    profile = get_profile(profile_id)
    architecture = load_compat().architectures[profile.architecture]
    runtime = burnin_runtime(profile_id)
    assert architecture.built_for(runtime)
    # NVIDIA GPUs get a CUDA build, AMD Instinct a ROCm one (torch.cuda answers on HIP)
    assert (runtime.rocm is not None) == (profile.vendor == "amd")


def test_an_mi300x_gets_a_rocm_build_not_a_cuda_one():
    mi300x = burnin_runtime("mi300x")
    assert (mi300x.cuda, mi300x.rocm) == (None, "6.2")
    assert mi300x.index_url == "https://download.pytorch.org/whl/rocm6.2"
    assert not load_compat().architectures["cdna3"].built_for(burnin_runtime("h100-sxm"))


def render_defaults(model: str) -> dict:
    """The burnin role's defaults as Ansible templates them for a node of `model`."""
    keys = ("burnin_gpu_runtime", "burnin_venv_requirements", "burnin_pip_index_url")
    return render_role_defaults("burnin", {"kiln_gpu_model": model}, keys)


def test_the_role_installs_the_build_the_table_chooses():
    b200 = render_defaults("b200")
    assert b200["burnin_venv_requirements"] == ["torch==2.7.1"]
    assert b200["burnin_pip_index_url"].endswith("/cu128")
    h100 = render_defaults("h100-sxm")
    assert h100["burnin_venv_requirements"] == ["torch==2.5.1"]
    assert h100["burnin_pip_index_url"].endswith("/cu124")


def test_the_role_documents_the_choice():
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert options["burnin_gpu_runtime"]["type"] == "dict"
    assert "default" not in options["burnin_venv_requirements"]  # chosen per architecture
