"""Burn-in inside an image (kiln_burnin.container): the image must be one the nodes can run.

The workloads run with `srun --container=BUNDLE` (runtime oci) or `--container-image=IMAGE`
(runtime pyxis), so the containers stage must be on; with oci the image must be one of
kiln_containers.images (only those are unpacked as bundles on the nodes). Slurm's OCI bundles
get no GPU devices from kiln (that takes the NVIDIA Container Toolkit's hook, which kiln does
not install), so a GPU node's burn-in in an image needs runtime pyxis, whose enroot brings the
GPUs in: refused here rather than every GPU failing its GEMM and being drained.
"""

from __future__ import annotations

from kiln.inventory.containers_spec import ContainersSpec
from kiln.inventory.context import COMPUTE, InventoryContext
from kiln.inventory.findings import FindingCollector
from kiln.inventory.schema import BurninSpec


def burnin_image_is_runnable(ctx: InventoryContext, out: FindingCollector) -> None:
    burnin, _ = ctx.cluster_value("kiln_burnin", BurninSpec())
    containers, _ = ctx.cluster_value("kiln_containers", ContainersSpec())
    if burnin is None or burnin.container is None or containers is None:
        return  # unset, or unreadable (reported by kiln.inventory.values)
    image = burnin.container
    origin = ctx.written_at("kiln_burnin", "container")
    if not containers.enabled:
        out.error(
            f"kiln_burnin.container {image} needs the containers stage "
            "(kiln_containers.enabled is false)",
            origin=origin,
            key="kiln_burnin.container",
            hint="enable kiln_containers with the image in its images, or unset the container",
        )
        return
    if containers.runtime != "oci":
        return  # pyxis: enroot pulls the image when the job starts
    if image not in containers.images:
        out.error(
            f"kiln_burnin.container {image} is not one of kiln_containers.images: runtime oci "
            "runs only the images unpacked on the nodes",
            origin=origin,
            key="kiln_burnin.container",
            hint="add it to kiln_containers.images",
        )
    gpu_nodes = [
        name for name, host in ctx.hosts.items() if COMPUTE in host.groups and ctx.gpu_count(host)
    ]
    if gpu_nodes:
        out.error(
            f"kiln_burnin.container with runtime oci on GPU nodes ({', '.join(gpu_nodes[:3])}"
            f"{' and more' if len(gpu_nodes) > 3 else ''}): kiln's OCI bundles carry no GPU "
            "devices, so every GEMM would fail",
            origin=origin,
            key="kiln_burnin.container",
            hint="use kiln_containers.runtime pyxis (enroot brings the GPUs in) for burn-in "
            "in an image on GPU nodes",
        )
