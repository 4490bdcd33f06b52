"""Ansible filters of the nvidia and nccl stages (shimmed by playbooks/filter_plugins)."""

from __future__ import annotations

from typing import Any

from kiln.gpu.diag import upgrade_check
from kiln.gpu.facts import (
    Expected,
    check,
    fabric_pending,
    load_failure_cause,
    summary_from_packed,
)
from kiln.gpu.packages import (
    candidates,
    cuda_toolkit_package,
    driver_action,
    installed_packages,
    installed_stack_problems,
    nccl_package_version,
    nccl_tests_cuda_packages,
    offered_branches,
    stack_versions,
    upstream_version,
)
from kiln.gpu.platform import (
    driver_install_names,
    installed_driver,
    module_streams,
    platform_mismatch,
    role_platform,
    rpm_installed,
    stack_query,
    userns_sysctl,
)
from kiln.gpu.rails import NEAR_PATHS, rail_check, topology_from_packed
from kiln.gpu.rocm import action as rocm_action
from kiln.gpu.rocm import installed_problems, release_packages, rocm_release
from kiln.gpu.trust import key_problem
from kiln.parsers import ParseError
from kiln.parsers.nccl_tests import parse_text
from kiln.profiles import burnin_runtime, load_profiles


def gpu_profile(model: str) -> dict[str, Any]:
    """What the stack needs for a `kiln_gpu_model`: fabric manager, open modules, names (the
    profile carries compat.yml's driver rules, merged in by load_profiles)."""
    profile = load_profiles().get(model)
    if profile is None or not profile.is_gpu:
        return {
            "is_gpu": False,
            "fabric_manager": False,
            "open_kernel_modules": False,
            "product_names": [],
            "min_driver_branch": None,
        }
    return {
        "is_gpu": True,
        "fabric_manager": profile.fabric_manager_required,
        "open_kernel_modules": profile.open_kernel_modules,
        "product_names": list(profile.product_names),
        "min_driver_branch": profile.min_driver_branch,
    }


def gpu_check(
    summary: dict[str, Any],
    gpu_count: int,
    product_names: list[str] | None = None,
    driver_version: str | None = None,
    fabric_manager: bool = False,
    health: bool = True,
    nvlink_domain: str | None = None,
) -> list[str]:
    expected = Expected(
        gpu_count=int(gpu_count),
        product_names=tuple(product_names or ()),
        driver_version=str(driver_version) if driver_version else None,
        fabric_manager=bool(fabric_manager),
        nvlink_domain=str(nvlink_domain) if nvlink_domain else None,
        health=bool(health),
    )
    return check(summary, expected)


def rail_verdict(
    topology: dict[str, Any] | None, hcas: list[str] | None, paths: list[str] | None = None
) -> dict[str, Any]:
    # Ansible may hand an absent topology over as "" rather than None.
    known = topology if isinstance(topology, dict) else None
    return rail_check(known, [str(hca) for hca in hcas or ()], tuple(paths or NEAR_PATHS))


def driver_load_failure(
    smi_error: str, kernel: str, version: str, module_built: bool, make_log_tail: str = ""
) -> str:
    return load_failure_cause(
        kernel=kernel,
        version=upstream_version(version),
        smi_error=smi_error,
        module_built=bool(module_built),
        make_log_tail=make_log_tail,
    )


def nccl_check_failures(stdout: str, gpus: int) -> list[str]:
    """What is wrong with a quick single-node `all_reduce_perf -g GPUS` run after an NCCL
    change (the nccl role's check): unreadable output, fewer GPUs than declared, wrong or
    out-of-bounds values; [] when it passed."""
    try:
        result = parse_text(stdout or "")
    except ParseError as error:
        return [f"all_reduce_perf printed no result: {error.message}"]
    problems = []
    if len(result.devices) != int(gpus):
        problems.append(
            f"all_reduce_perf used {len(result.devices)} GPU(s), the node declares {gpus}"
        )
    if result.wrong_total:
        problems.append(f"{result.wrong_total} wrong value(s) in the results")
    if result.out_of_bounds:
        problems.append(f"{result.out_of_bounds} out-of-bounds value(s)")
    return problems


FILTERS = {
    "kiln_gpu_summary": summary_from_packed,
    "kiln_gpu_check": gpu_check,
    "kiln_gpu_fabric_pending": fabric_pending,
    "kiln_gpu_topology": topology_from_packed,
    "kiln_gpu_rails": rail_verdict,
    "kiln_gpu_profile": gpu_profile,
    # burn-in's torch build for a kiln_gpu_model, by GPU architecture (compat.yml burnin_runtimes)
    "kiln_burnin_runtime": lambda model: burnin_runtime(str(model)).for_ansible(),
    "kiln_driver_load_failure": driver_load_failure,
    # the DCGM check after a driver upgrade: only a diag that ran and passed resumes the node
    "kiln_dcgmi_upgrade_check": upgrade_check,
    "kiln_dpkg_installed": installed_packages,
    "kiln_driver_action": lambda installed, branch: driver_action(installed, int(branch)),
    "kiln_apt_candidates": lambda madison, branch, repository=None: candidates(
        madison, int(branch), repository
    ),
    "kiln_apt_branches": offered_branches,
    "kiln_upstream_version": upstream_version,
    "kiln_nccl_check_failures": nccl_check_failures,
    "kiln_nccl_package_version": lambda nccl, cuda: nccl_package_version(str(nccl), str(cuda)),
    "kiln_cuda_toolkit_package": lambda cuda: cuda_toolkit_package(str(cuda)),
    "kiln_nccl_tests_cuda_packages": lambda cuda, cudart_dev="cuda-cudart-dev": (
        nccl_tests_cuda_packages(str(cuda), str(cudart_dev))
    ),
    "kiln_key_problem": key_problem,
    # the node's OS entry (platforms.yml): repository, key, package names, hold mechanism
    "kiln_gpu_platform": role_platform,
    "kiln_installed_driver": installed_driver,
    "kiln_rpm_installed": rpm_installed,
    "kiln_driver_install_names": driver_install_names,
    "kiln_module_streams": module_streams,
    "kiln_userns_sysctl": userns_sysctl,
    "kiln_platform_mismatch": lambda facts, os_id, arch: (
        platform_mismatch(facts, str(os_id), str(arch)) or ""
    ),
    # preflight: what to ask the package manager, and the versions among its answer
    "kiln_stack_query": stack_query,
    "kiln_stack_versions": stack_versions,
    "kiln_installed_stack_problems": lambda found: installed_stack_problems(
        found.get("driver"), found.get("cuda"), found.get("nccl")
    ),
    # the rocm stage (AMD Instinct): AMD's repositories for a release, what dpkg holds against it
    "kiln_rocm_release": lambda facts, release, suite=None: rocm_release(
        facts, str(release), suite or None
    ),
    "kiln_rocm_installed_problems": installed_problems,
    "kiln_rocm_action": lambda listing, release: rocm_action(listing, str(release)),
    "kiln_rocm_release_packages": lambda listing, release: release_packages(listing, str(release)),
}
