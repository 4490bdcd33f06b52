"""Power and cooling policy: GPU power limits, clocks and persistence, BMC fan profiles, sensors.

The core never prints. `gpu` turns `nvidia-smi --query-gpu` into per-GPU state, plans the
nvidia-smi commands that bring a GPU to the policy (only what differs) and checks the read-back;
`bmc` recognises a board from its BMC's own `mc info` / `fru print` and hands out the vendor's
fan-profile commands, refusing boards it does not know; `sensors` judges `ipmitool sdr` readings
against thresholds; `show` reads the nodes' answers for `kiln power show` (kiln.survey.power
sends the query). The power role calls the same functions through its filter plugin.
"""

from __future__ import annotations

from kiln.power.bmc import (
    ADAPTERS,
    BoardIdentity,
    FanAdapter,
    UnknownBoard,
    UnsupportedProfile,
    fan_plan,
    identify,
    select_adapter,
)
from kiln.power.gpu import (
    QUERY_FIELDS,
    GpuPolicy,
    GpuState,
    check_readback,
    plan_commands,
    read_states,
)
from kiln.power.sensors import SensorLimits, judge_sensors

__all__ = [
    "ADAPTERS",
    "QUERY_FIELDS",
    "BoardIdentity",
    "FanAdapter",
    "GpuPolicy",
    "GpuState",
    "SensorLimits",
    "UnknownBoard",
    "UnsupportedProfile",
    "check_readback",
    "fan_plan",
    "identify",
    "judge_sensors",
    "plan_commands",
    "read_states",
    "select_adapter",
]
