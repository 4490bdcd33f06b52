"""Judge BMC temperature and fan sensors (`ipmitool sdr elist` / `sdr list`) against thresholds.

A sensor the BMC itself marks critical or non-recoverable fails, whatever kiln's thresholds say.
Temperatures (unit "degrees C") fail above `temperature_max_c`, or `inlet_max_c` for sensors named
like an inlet or ambient sensor; fans read in RPM fail below `fan_min_rpm`. Sensors with no
reading ("ns", "No Reading", "Disabled") are not judged: absent hardware is not a fault.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from kiln.parsers.ipmitool import SdrSensor, parse_sdr

_INLET = re.compile(r"inlet|ambient|intake", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SensorLimits:
    temperature_max_c: float = 90.0
    inlet_max_c: float = 35.0  # ASHRAE A2 allowable inlet
    fan_min_rpm: float = 300.0

    @classmethod
    def from_mapping(cls, data: Mapping | None) -> SensorLimits:
        data = {k: float(v) for k, v in dict(data or {}).items() if v is not None}
        return cls(**data)


def _kind(sensor: SdrSensor) -> str | None:
    unit = (sensor.unit or "").lower()
    if unit.startswith("degrees c"):
        return "temperature"
    if unit.startswith("rpm"):
        return "fan"
    return None


def judge_sensors(text: str, limits: SensorLimits | None = None) -> dict:
    """{"checked": n, "problems": [...], "readings": [{name, kind, value, status}]}."""
    limits = limits or SensorLimits()
    problems: list[str] = []
    readings: list[dict] = []
    for sensor in parse_sdr(text):
        kind = _kind(sensor)
        if kind is None or sensor.value is None:
            continue
        readings.append({"name": sensor.name, "kind": kind, "value": sensor.value,
                         "status": sensor.status})  # fmt: skip
        if sensor.is_critical:
            problems.append(f"{sensor.name}: {sensor.reading} (BMC status {sensor.status})")
        elif kind == "temperature":
            limit = limits.inlet_max_c if _INLET.search(sensor.name) else limits.temperature_max_c
            if sensor.value > limit:
                problems.append(f"{sensor.name}: {sensor.value:g} C is above {limit:g} C")
        elif sensor.value < limits.fan_min_rpm:
            problems.append(
                f"{sensor.name}: {sensor.value:g} RPM is below {limits.fan_min_rpm:g} RPM"
            )
    return {"checked": len(readings), "problems": problems, "readings": readings}
