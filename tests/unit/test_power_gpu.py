"""kiln.power.gpu: reading GPUs, planning only what differs, naming the GPU that did not take it."""

from __future__ import annotations

from captures import shared_capture
from kiln.power import QUERY_FIELDS, GpuPolicy, check_readback, plan_commands, read_states


def _row(index, pm="Enabled", limit="700.00", gr="1980", mem="2619"):
    values = {
        "index": str(index), "pci.bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "persistence_mode": pm, "power.limit": limit, "power.default_limit": "700.00",
        "power.min_limit": "200.00", "power.max_limit": "700.00", "power.draw": "69.85",
        "clocks.current.graphics": gr, "clocks.current.memory": mem,
        "clocks.max.graphics": "1980", "clocks.max.memory": "2619", "temperature.gpu": "41",
        "clocks_event_reasons.active": "0x0000000000000001",
    }  # fmt: skip
    return ", ".join(values[field] for field in QUERY_FIELDS)


def _text(*rows):
    return "\n".join(rows) + "\n"


def test_reads_the_recorded_h100_query_with_its_header():
    gpu = read_states(
        shared_capture("nvidia-smi-query-gpu-csv/h100_80gb_hbm3_allfields_idle.csv").read_text(),
        fields=None,
    )[0]
    assert (gpu.index, gpu.bus_id, gpu.persistence) == (0, "00000000:00:09.0", True)
    assert (gpu.power_limit_w, gpu.default_limit_w) == (700.0, 700.0)
    assert (gpu.min_limit_w, gpu.max_limit_w, gpu.power_draw_w) == (200.0, 700.0, 69.85)
    assert gpu.temperature_c == 41.0
    assert gpu.event_reasons_mask == "0x0000000000000001"


def test_plans_only_what_differs():
    states = read_states(_text(_row(0, pm="Disabled"), _row(1, limit="500.00"), _row(2)))
    commands, refused = plan_commands(states, GpuPolicy.from_mapping({"power_limit_w": 500}))
    assert refused == []
    assert commands == [
        ["nvidia-smi", "-i", "0", "-pm", "1"],
        ["nvidia-smi", "-i", "0", "-pl", "500"],
        ["nvidia-smi", "-i", "2", "-pl", "500"],
    ]


def test_converged_gpus_plan_nothing_and_default_limit_is_the_gpus_own():
    states = read_states(_text(_row(0), _row(1)))
    assert plan_commands(states, GpuPolicy()) == ([], [])
    assert check_readback(states, GpuPolicy(), expected_gpus=2) == []


def test_clocks_are_locked_when_out_of_range_or_when_the_policy_changed():
    policy = GpuPolicy.from_mapping({
        "gpu_clocks": {"min_mhz": 1410, "max_mhz": 1980},
        "memory_clocks": {"min_mhz": 2619, "max_mhz": 2619},
    })  # fmt: skip
    states = read_states(_text(_row(0, gr="345"), _row(1)))
    commands, _ = plan_commands(states, policy)
    assert commands == [["nvidia-smi", "-i", "0", "-lgc", "1410,1980"]]
    commands, _ = plan_commands(states, policy, reapply_clocks=True)
    assert ["nvidia-smi", "-i", "1", "-lgc", "1410,1980"] in commands
    assert ["nvidia-smi", "-i", "1", "-lmc", "2619,2619"] in commands


def test_a_limit_outside_the_gpus_own_range_is_refused_not_sent():
    states = read_states(_text(_row(0)))
    commands, refused = plan_commands(states, GpuPolicy(power_limit_w=800))
    assert commands == []
    assert refused == ["GPU 0 (00000000:18:00.0): power limit 800 W is outside the GPU's own "
                       "range 200-700 W"]  # fmt: skip


def test_readback_names_the_gpu_that_did_not_take_the_setting():
    states = read_states(_text(_row(0, limit="500.00"), _row(3, limit="700.00", pm="Disabled")))
    problems = check_readback(states, GpuPolicy(power_limit_w=500), expected_gpus=8)
    assert problems == [
        "2 GPU(s) answered (indexes 0, 3), 8 declared",
        "GPU 3 (00000000:1B:00.0): persistence mode Disabled, not Enabled",
        "GPU 3 (00000000:1B:00.0): power limit 700 W, not 500 W",
    ]


def test_readback_checks_locked_clocks():
    policy = GpuPolicy.from_mapping({"gpu_clocks": {"min_mhz": 1980, "max_mhz": 1980}})
    problems = check_readback(read_states(_text(_row(5, gr="1755"))), policy)
    assert problems == [
        "GPU 5 (00000000:1D:00.0): graphics clock 1755 MHz, outside the locked 1980-1980 MHz"
    ]
