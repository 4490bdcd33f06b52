"""`ipmitool sdr [list|elist]`, `ipmitool fru print` and `ipmitool mc info`.

sdr rows are pipe-separated: `name | value unit | status` (sdr list), or
`name | id | status | entity | value unit` (sdr elist). fru print and mc info are
`Key : value` lines; mc info ends with an indented list under "Additional Device Support".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kiln.parsers import ParseError
from kiln.parsers._common import integer

_KV = re.compile(r"^\s*(?P<key>[^:]+?)\s*:\s?(?P<value>.*?)\s*$")
_READING = re.compile(r"^(?P<num>[-+]?\d+(?:\.\d+)?)(?:\s+(?P<unit>\S.*))?$")


@dataclass(frozen=True, slots=True)
class SdrSensor:
    name: str
    value: float | None  # None for discrete sensors and "no reading"
    unit: str | None  # "degrees C", "RPM", "Volts", "Watts"
    reading: str  # the raw reading column ("45 degrees C", "0x00", "no reading")
    status: str  # ok, ns (no sensor), cr (critical), nr (non-recoverable), nc (non-critical)
    sensor_id: str | None = None  # elist only ("04h")
    entity: str | None = None  # elist only ("7.1")

    @property
    def is_critical(self) -> bool:
        return self.status in ("cr", "nr")


def parse_sdr(text: str) -> list[SdrSensor]:
    """Parse `ipmitool sdr`, `sdr list`, `sdr type ...` (3 columns) or `sdr elist` (5 columns)."""
    sensors: list[SdrSensor] = []
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
            raise ParseError(
                "ipmitool sdr", "expected 3 or 5 '|'-separated columns", line_no=line_no, line=line
            )
        value: float | None = None
        unit: str | None = None
        if match := _READING.match(reading):
            value = float(match["num"])
            unit = match["unit"] or None
        sensors.append(SdrSensor(name, value, unit, reading, status, sensor_id, entity))
    if not sensors:
        raise ParseError("ipmitool sdr", "no sensor rows")
    return sensors


@dataclass(frozen=True, slots=True)
class FruRecord:
    """`fru print` fields by their printed names ("Board Mfg", "Product Name", ...)."""

    fields: dict[str, str]
    description: str | None = None  # "Builtin FRU Device (ID 0)" when the header line is there

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
    """Parse `ipmitool fru print [id]`: one record per "FRU Device Description" block."""
    records: list[FruRecord] = []
    fields: dict[str, str] = {}
    description: str | None = None
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _KV.match(line)
        if not match:
            raise ParseError("ipmitool fru", "expected 'Key : value'", line_no=line_no, line=line)
        key, value = match["key"], match["value"]
        if key == "FRU Device Description":
            if fields or description is not None:
                records.append(FruRecord(fields, description))
            fields, description = {}, value
            continue
        fields.setdefault(key, value)
    if fields or description is not None:
        records.append(FruRecord(fields, description))
    if not records:
        raise ParseError("ipmitool fru", "no FRU fields")
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
    """Parse `ipmitool mc info`."""
    fields: dict[str, str] = {}
    lists: dict[str, list[str]] = {}
    current_list: str | None = None
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if current_list is not None and line.startswith((" ", "\t")) and ":" not in line:
            lists[current_list].append(line.strip())
            continue
        match = _KV.match(line)
        if not match:
            raise ParseError(
                "ipmitool mc info", "expected 'Key : value'", line_no=line_no, line=line
            )
        key, value = match["key"], match["value"]
        if value:
            fields[key] = value
            current_list = None
        else:
            current_list = key
            lists[key] = []
    if "Manufacturer ID" not in fields:
        raise ParseError("ipmitool mc info", "no 'Manufacturer ID' line")
    return McInfo(fields, tuple(lists.get("Additional Device Support", ())))
