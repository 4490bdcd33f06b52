"""Judge a BMC's sensors (`ipmitool sdr elist`): thresholds, and the states of discrete sensors.

Threshold sensors: a sensor the BMC itself marks critical or non-recoverable fails, whatever
kiln's thresholds say. Temperatures (unit "degrees C") fail above `temperature_max_c`, or
`inlet_max_c` for sensors named like an inlet or ambient sensor; fans read in RPM fail below
`fan_min_rpm`.

Discrete sensors: ipmitool prints "ok" in the status column of every readable discrete sensor and
puts its state in the reading, so a failed power supply reads

    Power Supply 1   | 06h | ok  | 10.1 | 0 Watts, Presence detected, Failure detected

The states below fail the node even with that "ok": power supply or power unit failure, predictive
failure, AC lost (or out of range), configuration error, drive fault (and a drive in a failed or
critical array), lost or degraded redundancy (power supplies, fans), a transition to a critical
or non-recoverable state, and the processor and memory faults IPMI defines (IERR, thermal trip,
uncorrectable ECC, ...). The state names are ipmitool's (include/ipmitool/ipmi_sel.h).

Sensors with no reading ("ns": "No Reading", "Disabled", absent hardware) are not judged:
absent hardware is not a fault. Nor are "Presence detected", "Fully Redundant", "Correctable ECC"
and the other states that report, not fail.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from kiln.parsers.ipmitool import SdrSensor, read_sdr

_INLET = re.compile(r"inlet|ambient|intake", re.IGNORECASE)

# State -> what it means. Matched case-insensitively against each state ipmitool printed.
FAULT_STATES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), meaning)
    for pattern, meaning in (
        (r"^failure detected$", "failure"),
        (r"^predictive failure(?! deasserted)", "predictive failure"),
        (r"ac lost|ac out-of-range|^power supply inactive$", "AC lost"),
        (r"^config(?:uration)? error", "configuration error"),
        (r"^drive fault$|^in (?:failed|critical) array$|^rebuild aborted$", "drive fault"),
        (r"^redundancy (?:lost|degraded)|^non-redundant", "redundancy lost"),
        (r"^transition to (?:critical|non-recoverable)", "critical state"),
        (r"^(?:ierr|thermal trip|frb\d/.*|uncorrectable machine check exception)$", "processor"),
        (r"^(?:uncorrectable ecc|memory scrub failed|critical overtemperature)$", "memory"),
        (r"^(?:soft-power control failure|install error)$", "failure"),
    )
)


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


def faults(sensor: SdrSensor) -> list[str]:
    """The states of a readable sensor that are faults ("Failure detected", "Drive Fault")."""
    if not sensor.has_reading:
        return []
    return [s for s in sensor.states if any(p.search(s) for p, _ in FAULT_STATES)]


def _labels(sensors: list[SdrSensor]) -> list[str]:
    """Sensor names for people; a name several sensors share (Dell's "Status") gets its id
    and entity ("Status [65h, entity 10.2]")."""
    counts = Counter(s.name for s in sensors)
    return [
        f"{s.name} [{s.sensor_id}, entity {s.entity}]"
        if counts[s.name] > 1 and s.sensor_id
        else s.name
        for s in sensors
    ]


def judge_sensors(text: str, limits: SensorLimits | None = None) -> dict:
    """{"checked": n, "problems": [...], "readings": [{name, kind, value, status}],
    "discrete": [{name, states, status, faults}], "warnings": [lines left out]}."""
    limits = limits or SensorLimits()
    sdr = read_sdr(text)
    problems: list[str] = []
    readings: list[dict] = []
    discrete: list[dict] = []
    for sensor, label in zip(sdr.sensors, _labels(sdr.sensors), strict=True):
        if not sensor.has_reading:
            continue
        bad = faults(sensor)
        if sensor.states:
            discrete.append({"name": label, "states": list(sensor.states),
                             "status": sensor.status, "faults": bad})  # fmt: skip
        kind = _kind(sensor)
        if kind is not None and sensor.value is not None:
            readings.append({"name": label, "kind": kind, "value": sensor.value,
                             "status": sensor.status})  # fmt: skip
        if bad:
            problems.append(f"{label}: {', '.join(bad)} (BMC status {sensor.status})")
        elif sensor.is_critical:
            problems.append(f"{label}: {sensor.reading} (BMC status {sensor.status})")
        elif kind == "temperature" and sensor.value is not None:
            limit = limits.inlet_max_c if _INLET.search(sensor.name) else limits.temperature_max_c
            if sensor.value > limit:
                problems.append(f"{label}: {sensor.value:g} C is above {limit:g} C")
        elif kind == "fan" and sensor.value is not None and sensor.value < limits.fan_min_rpm:
            problems.append(f"{label}: {sensor.value:g} RPM is below {limits.fan_min_rpm:g} RPM")
    return {
        "checked": len(readings),
        "problems": problems,
        "readings": readings,
        "discrete": discrete,
        "warnings": [s.describe() for s in sdr.skipped],
    }
