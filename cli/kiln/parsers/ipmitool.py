"""`ipmitool sdr [list|elist|type ...]`, `ipmitool fru print` and `ipmitool mc info`.

sdr rows are pipe-separated: `name | value unit | status` (sdr list), or
`name | id | status | entity | reading` (sdr elist, sdr type). The reading of a discrete sensor is
the list of states ipmitool decoded, after the number when there is one:

    Power Supply 1   | 06h | ok  | 10.1 | 0 Watts, Presence detected, Failure detected
    PSU1 Status      | E0h | ok  | 10.1 | Presence detected, Power Supply AC lost

The status column is "ok" for every readable discrete sensor, whatever its state: a failed power
supply reads "ok" there (lib/ipmi_sdr.c). `SdrSensor.states` keeps the states; judging them is
kiln.power.sensors'. `sdr list` (3 columns) prints discrete readings as raw hex ("0x00"): nothing
to judge, which is why kiln reads `sdr elist`.

fru print and mc info are `Key : value` lines; mc info ends with an indented list under
"Additional Device Support". Lines that are none of these (ipmitool's own complaints folded into
the capture: "Unable to send command: Invalid argument", "Device not present (Timeout)") are left
out and listed; only output with nothing usable is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kiln.parsers._common import SkippedLine, integer, nothing_usable, skip

_KV = re.compile(r"^\s*(?P<key>[^:]+?)\s*:\s?(?P<value>.*?)\s*$")
_READING = re.compile(r"^(?P<num>[-+]?\d+(?:\.\d+)?)(?:\s+(?P<unit>\S.*))?$")
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
SDR = "ipmitool sdr"
_FRU_AREAS = ("Chassis ", "Board ", "Product ")  # the fields of `fru print` (lib/ipmi_fru.c)
# What ipmitool prints in the status column (lib/ipmi_sdr.c); anything else is not a sensor row
# (an ansible or pdsh header such as "node1 | CHANGED | rc=0 >>").
STATUSES = {"ok", "ns", "nc", "cr", "nr", "lnc", "unc", "lcr", "ucr", "lnr", "unr", "na"}


@dataclass(frozen=True, slots=True)
class SdrSensor:
    name: str
    value: float | None  # None for discrete sensors and "no reading"
    unit: str | None  # "degrees C", "RPM", "Volts", "Watts"
    reading: str  # the raw reading column ("45 degrees C", "0x00", "no reading")
    status: str  # ok, ns (no sensor), cr (critical), nr (non-recoverable), nc (non-critical)
    sensor_id: str | None = None  # elist only ("04h")
    entity: str | None = None  # elist only ("7.1")
    states: tuple[str, ...] = ()  # discrete states ("Presence detected", "Failure detected")

    @property
    def is_critical(self) -> bool:
        return self.status in ("cr", "nr", "lcr", "ucr", "lnr", "unr")

    @property
    def has_reading(self) -> bool:
        """False for "ns" sensors (absent, disabled, no reading): nothing to judge."""
        return self.status != "ns"


@dataclass(frozen=True, slots=True)
class SdrReading:
    sensors: list[SdrSensor]
    skipped: list[SkippedLine] = field(default_factory=list)


def _split_reading(reading: str) -> tuple[float | None, str | None, tuple[str, ...]]:
    """(value, unit, states) of a reading column: "0 Watts, Presence detected" -> (0.0, "Watts",
    ("Presence detected",)). "AC out-of-range, but present" is one state, commas and all."""
    parts: list[str] = []
    for part in (p.strip() for p in reading.split(",")):
        if parts and part.startswith("but "):
            parts[-1] += ", " + part
        elif part:
            parts.append(part)
    value: float | None = None
    unit: str | None = None
    if parts and (match := _READING.match(parts[0])):
        value, unit = float(match["num"]), match["unit"] or None
        parts = parts[1:]
    if len(parts) == 1 and (_HEX.match(parts[0]) or parts[0].lower() == "no reading"):
        parts = []
    return value, unit, tuple(parts)


def read_sdr(text: str) -> SdrReading:
    """Read `ipmitool sdr`, `sdr list`, `sdr type ...` (3 columns) or `sdr elist` (5 columns);
    lines that are not sensor rows are skipped and listed."""
    sensors: list[SdrSensor] = []
    skipped: list[SkippedLine] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split("|")]
        if len(cols) == 3:
            name, reading, status = cols
            sensor_id = entity = None
        elif len(cols) == 5:
            name, sensor_id, status, entity, reading = cols
        else:
            damaged = "expected 3 or 5 '|'-separated columns" if "|" in line else None
            skip(SDR, skipped, line_no, line, damaged=damaged)
            continue
        if status.lower() not in STATUSES:
            skip(SDR, skipped, line_no, line)
            continue
        value, unit, states = _split_reading(reading)
        sensors.append(SdrSensor(name, value, unit, reading, status, sensor_id, entity, states))
    if not sensors:
        raise nothing_usable(SDR, "sensor rows", skipped)
    return SdrReading(sensors, skipped)


def parse_sdr(text: str) -> list[SdrSensor]:
    """The sensors of `ipmitool sdr` output (see read_sdr for the lines it leaves out)."""
    return read_sdr(text).sensors


@dataclass(frozen=True, slots=True)
class FruRecord:
    """`fru print` fields by their printed names ("Board Mfg", "Product Name", ...)."""

    fields: dict[str, str]
    description: str | None = None  # "Builtin FRU Device (ID 0)" when the header line is there
    notes: tuple[str, ...] = ()  # what ipmitool said instead: "Device not present (Timeout)"

    @property
    def board_manufacturer(self) -> str | None:
        return self.fields.get("Board Mfg")

    @property
    def board_product(self) -> str | None:
        return self.fields.get("Board Product")

    @property
    def board_serial(self) -> str | None:
        return self.fields.get("Board Serial")

    @property
    def product_manufacturer(self) -> str | None:
        return self.fields.get("Product Manufacturer")

    @property
    def product_name(self) -> str | None:
        return self.fields.get("Product Name")

    @property
    def product_serial(self) -> str | None:
        return self.fields.get("Product Serial")


def parse_fru(text: str) -> list[FruRecord]:
    """Parse `ipmitool fru print [id]`: one record per "FRU Device Description" block. A line
    without a colon inside a block ("Device not present (Timeout)") is that device's note."""
    records: list[FruRecord] = []
    fields: dict[str, str] = {}
    notes: list[str] = []
    description: str | None = None
    skipped: list[SkippedLine] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _KV.match(line)
        if not match:
            if description is not None:
                notes.append(line.strip())
            else:
                skip("ipmitool fru", skipped, line_no, line)
            continue
        key, value = match["key"], match["value"]
        if key == "FRU Device Description":
            if fields or description is not None:
                records.append(FruRecord(fields, description, tuple(notes)))
            fields, description, notes = {}, value, []
            continue
        if not key.startswith(_FRU_AREAS):  # "Error: Unable to establish IPMI v2 ..."
            skip("ipmitool fru", skipped, line_no, line)
            continue
        fields.setdefault(key, value)
    if fields or description is not None:
        records.append(FruRecord(fields, description, tuple(notes)))
    if not records:
        raise nothing_usable("ipmitool fru", "FRU fields", skipped)
    return records


@dataclass(frozen=True, slots=True)
class McInfo:
    """`mc info`: the BMC's identity. Vendor adapters match on manufacturer and product ids."""

    fields: dict[str, str]
    additional_device_support: tuple[str, ...] = field(default=())

    @property
    def manufacturer_id(self) -> int | None:
        return integer(self.fields.get("Manufacturer ID"))

    @property
    def manufacturer_name(self) -> str | None:
        return self.fields.get("Manufacturer Name")

    @property
    def product_id(self) -> int | None:
        # "8192 (0x2000)"
        return integer(self.fields.get("Product ID"))

    @property
    def product_name(self) -> str | None:
        return self.fields.get("Product Name")

    @property
    def firmware_revision(self) -> str | None:
        return self.fields.get("Firmware Revision")


def parse_mc_info(text: str) -> McInfo:
    """Parse `ipmitool mc info`; lines that are not `Key : value` are left out."""
    fields: dict[str, str] = {}
    lists: dict[str, list[str]] = {}
    current_list: str | None = None
    skipped: list[SkippedLine] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if current_list is not None and line.startswith((" ", "\t")) and ":" not in line:
            lists[current_list].append(line.strip())
            continue
        match = _KV.match(line)
        if not match:
            skip("ipmitool mc info", skipped, line_no, line)
            current_list = None
            continue
        key, value = match["key"], match["value"]
        if value:
            fields[key] = value
            current_list = None
        else:
            current_list = key
            lists[key] = []
    if "Manufacturer ID" not in fields:
        raise nothing_usable("ipmitool mc info", "'Manufacturer ID' line", skipped)
    return McInfo(fields, tuple(lists.get("Additional Device Support", ())))
