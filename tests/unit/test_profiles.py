"""Hardware profiles and the version-compatibility table: data sanity and the check rules."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kiln.profiles import (
    CompatTable,
    HardwareProfile,
    Versions,
    get_profile,
    load_compat,
    load_profiles,
    parse_version,
    profile_for_product_name,
)

REQUIRED_IDS = {
    "a100-sxm-40g",
    "a100-sxm-80g",
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "h200-sxm",
    "h200-nvl",
    "b200",
    "l40s",
    "none",
}
GPU_IDS = sorted(REQUIRED_IDS - {"none"})


@pytest.fixture(scope="module")
def compat() -> CompatTable:
    return load_compat()


def errors(problems):
    return [p for p in problems if p.level == "error"]


# ----------------------------------------------------------------------------- version helper


def test_parse_version_compares_numerically():
    assert parse_version("12.10") > parse_version("12.9")
    assert parse_version("2.27.7") > parse_version("2.9.9")
    assert parse_version("22.05") == (22, 5)
    with pytest.raises(ValueError):
        parse_version("12.x")


# ----------------------------------------------------------------------------- hardware profiles


def test_every_required_profile_is_present_and_keyed_by_its_id():
    profiles = load_profiles()
    assert set(profiles) >= REQUIRED_IDS
    for profile_id, profile in profiles.items():
        assert profile.id == profile_id


def test_loaders_are_cached():
    assert load_profiles() is load_profiles()
    assert load_compat() is load_compat()


@pytest.mark.parametrize("profile_id", GPU_IDS)
def test_gpu_profile_numbers_are_sane(profile_id):
    p = get_profile(profile_id)
    assert 1 <= p.gpu_count_min <= p.gpu_count_default <= p.gpu_count_max <= 8
    assert p.power_limit_min_w < p.power_limit_default_w <= p.power_limit_max_w <= 1200
    assert 100 <= p.bf16_tflops <= 5000
    assert 16 <= p.memory_gib <= 256
    assert p.product_names and all(n.startswith("NVIDIA ") for n in p.product_names)
    assert p.gres_type and p.gres_type.isidentifier() and p.gres_type.islower()
    # Floors sit below the peak and the typical figure, but are not trivially low.
    assert 0.4 * p.bf16_tflops <= p.burnin_floors.gemm_tflops < 0.8 * p.bf16_tflops
    assert 0.5 * p.allreduce_busbw_gbs <= p.burnin_floors.allreduce_busbw_gbs
    assert p.burnin_floors.allreduce_busbw_gbs < p.allreduce_busbw_gbs
    assert p.burnin_floors.gemm_relative_pct == 10
    assert p.burnin_floors.node_relative_pct == 10
    assert p.node_shape.cpus >= 64
    assert p.node_shape.real_memory_mb >= 256_000
    assert p.min_driver_branch is not None
    if p.nvswitch:
        assert p.nvlink and p.fabric_manager_required
    else:
        assert not p.fabric_manager_required


def test_datasheet_figures():
    expected_tflops = {
        "h100-sxm": 989,
        "h200-sxm": 989,
        "b200": 2250,
        "b300": 2250,  # HGX B300: 36 PFLOPS BF16 with sparsity over 8 GPUs, halved
        "a100-sxm-80g": 312,
        "h100-pcie": 756,
        "l40s": 362,
        "a100-sxm-40g": 312,  # the datasheet's 624 with sparsity, halved
        "h100-nvl": 835,  # 1,671 with sparsity
        "h200-nvl": 835,  # 1,671 with sparsity
    }
    for profile_id, tflops in expected_tflops.items():
        assert get_profile(profile_id).bf16_tflops == tflops
    h100 = get_profile("h100-sxm")
    assert (h100.power_limit_min_w, h100.power_limit_default_w, h100.power_limit_max_w) == (
        200,
        700,
        700,
    )
    assert h100.gpu_count_default == 8
    assert h100.gres_type == "h100"
    assert h100.node_shape.cpus == 2 * 56 * 2
    assert get_profile("a100-sxm-80g").allreduce_busbw_gbs == 230
    assert get_profile("b200").open_kernel_modules is True
    assert get_profile("h100-sxm").open_kernel_modules is False
    assert not get_profile("l40s").nvlink
    memory = {"a100-sxm-40g": 40, "h100-nvl": 94, "h200-nvl": 141, "h200-sxm": 141, "b200": 180}
    assert {k: get_profile(k).memory_gib for k in memory} == memory
    max_power = {"a100-sxm-40g": 400, "h100-nvl": 400, "h200-nvl": 600, "h200-sxm": 700}
    assert {k: get_profile(k).power_limit_max_w for k in max_power} == max_power
    for bridged in ("h100-nvl", "h200-nvl"):  # NVLink bridges between cards, no NVSwitch
        p = get_profile(bridged)
        assert p.nvlink and not p.nvswitch and not p.fabric_manager_required
    # The 40GB part's intra-node floor against the real 8 x A100-SXM4-40GB capture (235 GB/s).
    assert get_profile("a100-sxm-40g").burnin_floors.allreduce_busbw_gbs < 235


def test_cpu_only_profile():
    p = get_profile("none")
    assert (p.gpu_count_min, p.gpu_count_default, p.gpu_count_max) == (0, 0, 0)
    assert p.bf16_tflops is None and p.memory_gib is None and p.gres_type is None
    assert p.power_limit_default_w is None
    assert not (p.nvlink or p.nvswitch or p.fabric_manager_required)
    assert p.product_names == []
    assert p.burnin_floors.gemm_tflops == pytest.approx(0.0001)
    assert p.node_shape.cpus == 1
    assert p.node_shape.real_memory_mb == 1000
    assert p.min_driver_branch is None


def test_get_profile_unknown_id_raises_key_error_naming_known_ids():
    with pytest.raises(KeyError, match="h100-sxm"):
        get_profile("h100")


@pytest.mark.parametrize(
    ("product_name", "profile_id"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA B300 SXM6 AC", "b300"),  # what CUDA names a B300 (hardware.yml's sources)
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-80g"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm-40g"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("  nvidia  h100 80gb hbm3 ", "h100-sxm"),  # whitespace and case are ignored
    ],
)
def test_profile_for_product_name(product_name, profile_id):
    profile = profile_for_product_name(product_name)
    assert profile is not None
    assert profile.id == profile_id


@pytest.mark.parametrize(
    "product_name",
    ["NVIDIA A100-PCIE-40GB", "NVIDIA RTX A6000", "Tesla V100-SXM2-32GB", "Tesla V100", ""],
)
def test_profile_for_unknown_product_name_is_none(product_name):
    assert profile_for_product_name(product_name) is None


def test_product_names_are_unique_across_profiles():
    names = [n for p in load_profiles().values() for n in p.product_names]
    assert len(names) == len(set(names))


def _profile_data(**overrides):
    data = get_profile("h100-sxm").model_dump()
    data.update(overrides)
    return data


@pytest.mark.parametrize(
    "overrides",
    [
        {"gpu_count_default": 9},
        {"gpu_count_min": 9},
        {"power_limit_default_w": 800},
        {"power_limit_min_w": 700},
        {"power_limit_min_w": None},
        {"bf16_tflops": None},
        {"unexpected_key": 1},
    ],
)
def test_profile_model_rejects_inconsistent_data(overrides):
    with pytest.raises(ValidationError):
        HardwareProfile(**_profile_data(**overrides))


# ----------------------------------------------------------------------------- compatibility


def test_compat_table_content(compat):
    assert {b: d.max_cuda for b, d in compat.driver_branches.items()} == {
        535: "12.2",
        550: "12.4",
        560: "12.6",
        570: "12.8",
        575: "12.9",
        580: "13.0",
    }
    assert compat.fabric_manager.locked_to_driver is True
    assert compat.gpu_profiles["b200"].min_driver_branch == 570
    assert compat.gpu_profiles["h200-sxm"].min_driver_branch == 550
    assert compat.gpu_profiles["h100-sxm"].min_driver_branch == 525
    assert set(compat.gpu_profiles) <= set(load_profiles())
    assert {"2.18.5", "2.27.7"} <= set(compat.nccl)
    assert compat.slurm == ["22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "26.05"]
    assert any(t.slurm == "22.05" for t in compat.tested)  # the Debian 12 sandbox


def test_default_versions_is_the_newest_tested_combination(compat):
    default = compat.default_versions()
    assert default == Versions(driver_branch=580, cuda="13.0", nccl="2.27.7", slurm="25.05")
    newest = max((t.versions() for t in compat.tested), key=Versions.sort_key)
    assert default == newest


def test_default_falls_back_to_newest_when_none_is_marked(compat):
    data = compat.model_dump()
    for combo in data["tested"]:
        combo["default"] = False
    data["tested"].reverse()
    table = CompatTable.model_validate(data)
    assert table.default_versions() == compat.default_versions()


def test_two_marked_defaults_are_refused(compat):
    data = compat.model_dump()
    for combo in data["tested"]:
        combo["default"] = True
    with pytest.raises(ValidationError, match="more than one"):
        CompatTable.model_validate(data)


def test_default_combination_passes_for_every_profile(compat):
    assert compat.check(compat.default_versions(), load_profiles().values()) == []


def test_every_tested_combination_is_consistent(compat):
    for combo in compat.tested:
        assert compat.check(combo.versions()) == [], combo


def _versions(**overrides) -> Versions:
    base = {"driver_branch": 570, "cuda": "12.8", "nccl": "2.25.1", "slurm": "24.05"}
    base.update(overrides)
    return Versions(**base)


def test_cuda_newer_than_driver_supports(compat):
    problems = compat.check(_versions(driver_branch=550, nccl="2.25.1"))
    [p] = errors(problems)
    assert p.key == "cuda"
    assert p.message == "CUDA 12.8 needs driver branch >= 570; kiln_versions.driver_branch is 550"
    assert p.hint == "use driver branch 570 or newer, or CUDA 12.4"


def test_cuda_newer_than_any_driver(compat):
    problems = errors(compat.check(_versions(driver_branch=580, cuda="13.1", nccl="2.27.7")))
    by_key = {p.key: p for p in problems}
    assert set(by_key) == {"cuda", "nccl"}  # no known NCCL is built for 13.1 either
    assert "CUDA 13.1" in by_key["cuda"].message
    assert "kiln_versions.driver_branch is 580" in by_key["cuda"].message
    assert by_key["cuda"].hint == "use CUDA 13.0 or older"
    assert "no known NCCL is built for CUDA 13.1" in by_key["nccl"].hint


def test_unknown_driver_branch(compat):
    [p] = errors(compat.check(_versions(driver_branch=545)))
    assert p.key == "driver_branch"
    assert "545" in p.message
    assert "535, 550, 560, 570, 575, 580" in p.hint


def test_unknown_nccl(compat):
    [p] = errors(compat.check(_versions(nccl="2.22.3")))
    assert p.key == "nccl"
    assert "NCCL 2.22.3" in p.message
    assert "2.18.5" in p.hint and "2.27.7" in p.hint


def test_unknown_slurm(compat):
    [p] = errors(compat.check(_versions(slurm="21.08")))
    assert p.key == "slurm"
    assert "Slurm 21.08" in p.message
    assert "22.05, 23.02, 23.11, 24.05, 24.11, 25.05" in p.hint


def test_nccl_not_built_for_cuda(compat):
    [p] = errors(compat.check(_versions(nccl="2.18.5")))
    assert p.key == "nccl"
    assert p.message == "NCCL 2.18.5 is built for CUDA 11.0 to 12.2; kiln_versions.cuda is 12.8"
    assert "CUDA 11.0 to 12.2" in p.hint
    assert "use NCCL 2.27.7" in p.hint


def test_nccl_too_new_for_old_cuda(compat):
    [p] = errors(compat.check(_versions(driver_branch=535, cuda="11.8", nccl="2.27.7")))
    assert p.key == "nccl"
    assert "NCCL 2.27.7" in p.message and "kiln_versions.cuda is 11.8" in p.message


def test_b200_with_driver_550_fails(compat):
    versions = _versions(driver_branch=550, cuda="12.4", nccl="2.20.5", slurm="23.11")
    assert compat.check(versions, [get_profile("h100-sxm")]) == []  # tested, and fine for H100
    by_key = {p.key: p for p in errors(compat.check(versions, [get_profile("b200")]))}
    assert set(by_key) == {"driver_branch", "cuda"}
    p = by_key["driver_branch"]
    assert p.message == "b200 GPUs need driver branch >= 570; kiln_versions.driver_branch is 550"
    assert p.hint == "use driver branch 570 or newer"
    assert by_key["cuda"].message == (
        "b200 GPUs (blackwell) need CUDA >= 12.8; kiln_versions.cuda is 12.4"
    )


def test_h200_with_driver_535_fails_once_for_many_nodes(compat):
    versions = _versions(driver_branch=535, cuda="12.2", nccl="2.18.5", slurm="22.05")
    nodes = [get_profile("h200-sxm")] * 50 + [get_profile("none"), get_profile("a100-sxm-80g")]
    [p] = errors(compat.check(versions, nodes))
    assert "h200-sxm" in p.message and ">= 550" in p.message and "is 535" in p.message


def test_untested_but_compatible_is_only_a_warning(compat):
    versions = _versions(nccl="2.26.5", slurm="24.11")
    assert not compat.is_tested(versions)
    [p] = compat.check(versions, [get_profile("b200")])
    assert p.level == "warning"
    assert p.key is None
    assert "not a tested combination" in p.message
    assert "driver branch 580, CUDA 13.0, NCCL 2.27.7, Slurm 25.05" in p.hint


def test_errors_suppress_the_untested_warning(compat):
    problems = compat.check(_versions(driver_branch=550))
    assert all(p.level == "error" for p in problems)


def test_several_problems_are_all_reported(compat):
    versions = Versions(driver_branch=550, cuda="12.8", nccl="2.18.5", slurm="21.08")
    problems = compat.check(versions, [get_profile("b200")])
    assert sorted(p.key for p in errors(problems)) == ["cuda", "driver_branch", "nccl", "slurm"]


def test_versions_refuse_non_numeric_strings():
    with pytest.raises(ValidationError):
        _versions(cuda="latest")


# ----------------------------------------------------------------------------- architectures


def test_every_gpu_profile_names_its_architecture():
    expected = {
        "a100-sxm-40g": ("ampere", "8.0"),
        "a100-sxm-80g": ("ampere", "8.0"),
        "l40s": ("ada", "8.9"),
        "h100-sxm": ("hopper", "9.0"),
        "h100-pcie": ("hopper", "9.0"),
        "h100-nvl": ("hopper", "9.0"),
        "h200-sxm": ("hopper", "9.0"),
        "h200-nvl": ("hopper", "9.0"),
        "b200": ("blackwell", "10.0"),
    }
    found = {k: (p.architecture, p.compute_capability) for k, p in load_profiles().items()}
    assert {k: found[k] for k in expected} == expected
    assert found["none"] == (None, None)
    assert {p.architecture for p in load_profiles().values() if p.is_gpu} <= set(
        load_compat().architectures
    )


def test_a_gpu_profile_without_architecture_is_refused():
    with pytest.raises(ValidationError, match="architecture"):
        HardwareProfile(**_profile_data(architecture=None))


def test_blackwell_on_a_cuda_12_8_toolkit_is_fine(compat):
    versions = _versions()  # driver 570, CUDA 12.8: tested
    assert errors(compat.check(versions, [get_profile("b200"), get_profile("h100-sxm")])) == []


def test_an_architecture_whose_runtime_cannot_run_it_is_refused(compat):
    data = compat.model_dump()
    data["architectures"]["blackwell"]["burnin_runtime"] = "torch-2.5.1-cu124"
    with pytest.raises(ValidationError, match="blackwell needs CUDA >= 12.8"):
        CompatTable.model_validate(data)


def test_b300_is_blackwell_ultra_with_no_power_limits_guessed(compat):
    b300 = get_profile("b300")
    assert (b300.compute_capability, b300.architecture, b300.gres_type) == (
        "10.3", "blackwell", "b300",
    )  # fmt: skip
    assert b300.fabric_manager_required and b300.gpu_count_default == 8
    assert b300.min_driver_branch == 580 and b300.open_kernel_modules
    # no nvidia-smi capture of a B300: no limits, so validate checks none
    assert (b300.power_limit_min_w, b300.power_limit_max_w) == (None, None)
    versions = Versions(driver_branch=570, cuda="12.8", nccl="2.25.1", slurm="24.05")
    assert any("b300" in p.message for p in errors(compat.check(versions, [b300])))
