"""nvidia-smi topo -m (the GPU/NIC affinity matrix) against recorded real outputs."""

from pathlib import Path

import pytest

from captures import real_captures, shared_capture
from kiln.parsers import ParseError
from kiln.parsers.nvidia_smi_topo import TopoGpu, parse_topo, path_rank

FIXTURES = Path(__file__).parent.parent / "fixtures"
TOPO = FIXTURES / "real/nvidia-smi-topo-m"
H100_8NIC = TOPO / "h100_sxm_8nic_pix_nic_legend_drv570_sglang.txt"
H100_12NIC = TOPO / "h100_hgx_12nic_ib_and_eth_nic_legend_mooncake.txt"
DGX_A100_OCI = shared_capture("nvidia-smi-topo-m/dgx_a100_oci_mlx5_columns.txt")
DGX_A100_LEGEND = TOPO / "dgx_a100_40gb_nic_legend_drv525.txt"
RTX6000ADA = TOPO / "rtx6000ada_4gpu_4nic_asus_esc8000a_nic_legend.txt"
SWAPPED = FIXTURES / "derived/nvidia-smi-topo-m/h100_sxm_8nic_mlx5_3_and_mlx5_5_swapped.txt"


def _nearest(path: Path) -> dict[str, tuple[str | None, tuple[int, ...]]]:
    topo = parse_topo(path.read_text())
    return {nic: topo.nearest_gpus(nic) for nic in topo.nics}


def test_every_real_capture_reads_without_warnings():
    for path in real_captures("nvidia-smi-topo-m", "*.txt"):
        topo = parse_topo(path.read_text())
        assert topo.warnings == (), path.name
        assert topo.gpus and topo.nics, path.name
        # Every GPU row and every NIC row was read: the matrix is square.
        labels = {row for row, _ in topo.links}
        assert len(labels) == len(topo.gpus) + len(topo.nics), path.name


def test_h100_one_nic_per_gpu_with_nic_legend_and_gpu_numa_id():
    """8 x H100 SXM, driver 570: NIC0..NIC7 in the matrix, mlx5_0..7 in the NIC Legend."""
    topo = parse_topo(H100_8NIC.read_text())
    assert topo.has_nic_legend
    assert topo.nics == tuple(f"mlx5_{i}" for i in range(8))
    assert topo.nic_names["NIC3"] == "mlx5_3"
    assert topo.gpus[0] == TopoGpu(0, "0-47,96-143", "0", None)
    assert topo.gpus[7] == TopoGpu(7, "48-95,144-191", "1", None)
    assert topo.links[("GPU0", "GPU1")] == "NV18"
    assert topo.links[("GPU0", "GPU0")] == "X"
    assert topo.gpu_nic(3, "mlx5_3") == "PIX"
    assert topo.gpu_nic(3, "NIC3") == "PIX"  # a label works as well as the device name
    assert topo.gpu_nic(3, "mlx5_4") == "SYS"
    assert topo.gpu_nic(3, "mlx5_9") is None
    assert _nearest(H100_8NIC) == {f"mlx5_{i}": ("PIX", (i,)) for i in range(8)}


def test_h100_with_ethernet_ports_beside_the_rails():
    """12 NICs: GPU0 and GPU4 each share a PCIe switch with an IB HCA and a dual-port NIC."""
    assert _nearest(H100_12NIC) == {
        "mlx5_0": ("PIX", (0,)),
        "mlx5_1": ("PIX", (0,)),
        "mlx5_2": ("PIX", (0,)),
        "mlx5_3": ("PIX", (1,)),
        "mlx5_4": ("PIX", (2,)),
        "mlx5_5": ("PIX", (3,)),
        "mlx5_6": ("PIX", (4,)),
        "mlx5_7": ("PIX", (4,)),
        "mlx5_8": ("PIX", (4,)),
        "mlx5_9": ("PIX", (5,)),
        "mlx5_10": ("PIX", (6,)),
        "mlx5_11": ("PIX", (7,)),
    }
    topo = parse_topo(H100_12NIC.read_text())
    assert topo.gpus[4].cpu_affinity == "1,3,5,7,9,11"


def test_dgx_a100_without_nic_legend_names_nics_by_device():
    """Older driver: mlx5_N are the column labels, no NIC Legend, no GPU NUMA ID column."""
    topo = parse_topo(DGX_A100_OCI.read_text())
    assert not topo.has_nic_legend
    assert topo.nics == tuple(f"mlx5_{i}" for i in range(12))
    assert topo.gpus[2] == TopoGpu(2, "16-31,144-159", "1", None)
    nearest = _nearest(DGX_A100_OCI)
    # Two GPUs share a PCIe switch with two compute HCAs; the storage HCAs are far from all.
    assert nearest["mlx5_0"] == nearest["mlx5_1"] == ("PXB", (0, 1))
    assert nearest["mlx5_6"] == ("PXB", (4, 5))
    assert nearest["mlx5_4"] == ("SYS", tuple(range(8)))


def test_dgx_a100_with_nic_legend_and_tabs():
    topo = parse_topo(DGX_A100_LEGEND.read_text())
    assert topo.has_nic_legend and len(topo.nics) == 10
    assert topo.gpus[0] == TopoGpu(0, "48-63,176-191", "3", None)
    assert _nearest(DGX_A100_LEGEND)["mlx5_7"] == ("PXB", (6, 7))
    assert topo.links[("NIC8", "NIC9")] == "PIX"


def test_pcie_server_whose_nics_hang_off_the_cpu():
    nearest = _nearest(RTX6000ADA)
    assert nearest == {
        "mlx5_0": ("NODE", (0, 1)),
        "mlx5_1": ("NODE", (0, 1)),
        "mlx5_2": ("NODE", (2, 3)),
        "mlx5_3": ("NODE", (2, 3)),
    }


def test_swapped_legend_moves_the_hcas():
    nearest = _nearest(SWAPPED)
    assert nearest["mlx5_3"] == ("PIX", (5,))
    assert nearest["mlx5_5"] == ("PIX", (3,))


def test_path_ranks_nearest_first():
    assert [path_rank(c) for c in ("X", "PIX", "PXB", "PHB", "NODE", "SYS")] == [0, 1, 2, 4, 5, 6]
    assert path_rank("NV18") == 1
    assert path_rank("WHAT") > path_rank("SOC")


def test_prompt_warning_and_terminal_underline_are_skipped_and_named():
    """A capture pasted with its prompt and a stray message; the header as a terminal shows it."""
    lines = H100_8NIC.read_text().splitlines()
    lines[0] = "\x1b[4m" + lines[0] + "\x1b[0m"
    text = "\n".join(["$ nvidia-smi topo -m", *lines[:5], "some message", *lines[5:]])
    topo = parse_topo(text)
    assert topo.warnings == (
        "nvidia-smi topo -m: skipped line 1: '$ nvidia-smi topo -m'",
        "nvidia-smi topo -m: skipped line 7: 'some message'",
    )
    assert _nearest(H100_8NIC) == {nic: topo.nearest_gpus(nic) for nic in topo.nics}


def test_a_mangled_row_is_skipped_and_its_gpu_is_unknown():
    text = H100_8NIC.read_text().replace(
        "GPU3    NV18    NV18    NV18     X      NV18", "GPU3    NV18NV18    NV18     X      NV18"
    )
    topo = parse_topo(text)
    assert len(topo.warnings) == 1 and "unreadable row at line 5" in topo.warnings[0]
    assert [gpu.index for gpu in topo.gpus] == [0, 1, 2, 4, 5, 6, 7]
    assert topo.gpu_nic(3, "mlx5_3") == "PIX"  # still known from mlx5_3's own row


def test_output_without_a_matrix_is_an_error():
    with pytest.raises(ParseError, match="no matrix header"):
        parse_topo(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
        )
    # A GPU row whose header line was cut is not taken for a header.
    body = "\n".join(H100_8NIC.read_text().splitlines()[1:])
    with pytest.raises(ParseError, match="no matrix header"):
        parse_topo(body)
