"""BMC fan profiles through vendor adapters, recognised from the BMC's own product data.

A board is identified from `ipmitool mc info` (IANA manufacturer id, product id) and
`ipmitool fru print 0` (board / product names and part numbers). Each adapter says which boards
it knows; a board no adapter knows is refused (`UnknownBoard`) before any raw byte is sent, and
so is a profile the adapter has no documented command for (`UnsupportedProfile`).

The raw commands and where each vendor (or its community) documents them are in docs/power.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from kiln.parsers.ipmitool import parse_fru, parse_mc_info

PROFILES = ("standard", "optimal", "full", "heavy-io")

DELL_IANA = 674
SUPERMICRO_IANA = 10876


class UnknownBoard(ValueError):
    """No adapter knows this board: nothing is sent to its BMC."""


class UnsupportedProfile(ValueError):
    """The adapter knows the board but has no documented command for this profile."""


@dataclass(frozen=True, slots=True)
class BoardIdentity:
    manufacturer_id: int | None
    manufacturer_name: str | None
    product_id: int | None
    bmc_product_name: str | None
    firmware: str | None
    board_mfg: str | None = None
    board_product: str | None = None
    board_part_number: str | None = None
    product_manufacturer: str | None = None
    product_name: str | None = None

    def describe(self) -> str:
        names = [
            n for n in (self.product_name, self.board_product, self.board_part_number)
            if n and n.upper() != "NONE"
        ]  # fmt: skip
        model = " / ".join(dict.fromkeys(names)) or "no FRU product name"
        return (
            f"manufacturer {self.manufacturer_id} ({self.manufacturer_name or '?'}), "
            f"BMC product id {self.product_id}, {model}"
        )

    def names(self) -> list[str]:
        """Every model string the BMC reported, for matching."""
        values = (self.product_name, self.board_product, self.board_part_number,
                  self.bmc_product_name)  # fmt: skip
        return [v.strip() for v in values if v and v.strip() and v.strip().upper() != "NONE"]

    def to_dict(self) -> dict:
        return asdict(self)


def identify(mc_info: str, fru: str | None = None) -> BoardIdentity:
    """The board's identity from `mc info` and (optionally) `fru print 0` text."""
    mc = parse_mc_info(mc_info)
    record = parse_fru(fru)[0] if fru and fru.strip() else None
    get = (lambda key: record.fields.get(key)) if record else (lambda key: None)
    return BoardIdentity(
        manufacturer_id=mc.manufacturer_id,
        manufacturer_name=mc.manufacturer_name,
        product_id=mc.product_id,
        bmc_product_name=mc.product_name,
        firmware=mc.firmware_revision,
        board_mfg=get("Board Mfg"),
        board_product=get("Board Product"),
        board_part_number=get("Board Part Number"),
        product_manufacturer=get("Product Manufacturer"),
        product_name=get("Product Name"),
    )


@dataclass(frozen=True, slots=True)
class FanAdapter:
    """One vendor's fan-profile commands (ipmitool arguments after the connection options)."""

    name: str
    vendor: str
    manufacturer_id: int
    model_pattern: re.Pattern[str]  # a model string the BMC reports must match
    product_ids: frozenset[int] | None  # BMC product ids known to speak these commands
    set_commands: dict[str, tuple[tuple[str, ...], ...]]
    read_command: tuple[str, ...] | None = None  # reads the current profile back, when there is one
    decode: Callable[[str], str | None] | None = field(default=None, compare=False)

    def matches(self, board: BoardIdentity) -> bool:
        if board.manufacturer_id != self.manufacturer_id:
            return False
        if self.product_ids is not None and board.product_id not in self.product_ids:
            return False
        return any(self.model_pattern.search(name) for name in board.names())

    def commands_for(self, profile: str) -> tuple[tuple[str, ...], ...]:
        if profile not in self.set_commands:
            offered = ", ".join(self.set_commands)
            raise UnsupportedProfile(
                f"{self.name} has no documented command for fan profile {profile!r} "
                f"(it offers: {offered})"
            )
        return self.set_commands[profile]

    def current_profile(self, output: str) -> str | None:
        return self.decode(output) if self.decode else None


# Supermicro X10-X13/H11-H13 BMCs: OEM "fan mode" get (0x30 0x45 0x00) and set
# (0x30 0x45 0x01 <mode>); modes 0 standard, 1 full, 2 optimal, 4 heavy IO. X13/H13 (AST2600 BMC,
# the HGX H100/H200 generation: X13DEG-OAD in SYS-821GE-TNHR, H13DSG-O-CPU in AS -8125GS-TNHR)
# keep the same commands; X14/H14 changed their fan control and are refused (docs/power.md).
_SMC_MODES = {"standard": "0x00", "full": "0x01", "optimal": "0x02", "heavy-io": "0x04"}


def _smc_decode(output: str) -> str | None:
    text = output.strip().split()
    if not text:
        return None
    try:
        value = int(text[0], 16)
    except ValueError:
        return None
    return {int(code, 16): name for name, code in _SMC_MODES.items()}.get(value)


SUPERMICRO = FanAdapter(
    name="Supermicro X10-X13/H11-H13 BMC",
    vendor="supermicro",
    manufacturer_id=SUPERMICRO_IANA,
    model_pattern=re.compile(r"^(X10|X11|X12|X13|H11|H12|H13)[A-Z0-9]", re.IGNORECASE),
    product_ids=None,  # product ids vary per board; the board model decides
    set_commands={p: (("raw", "0x30", "0x45", "0x01", code),) for p, code in _SMC_MODES.items()},
    read_command=("raw", "0x30", "0x45", "0x00"),
    decode=_smc_decode,
)

# Dell iDRAC 7/8/9 (IPMI product id 256; PowerEdge R and the XE GPU servers: XE8545, XE9680):
# OEM 0x30 0x30 — 0x01 0x01 hands fans back to the
# iDRAC's automatic control, 0x01 0x00 takes manual control, 0x02 0xff <pct> sets every fan.
# No read-back exists, so the role keeps the last profile it applied in a state file.
DELL = FanAdapter(
    name="Dell iDRAC (PowerEdge)",
    vendor="dell",
    manufacturer_id=DELL_IANA,
    model_pattern=re.compile(r"PowerEdge|iDRAC|^R\d{3}|^XE\d{4}", re.IGNORECASE),
    product_ids=frozenset({256}),
    set_commands={
        "standard": (("raw", "0x30", "0x30", "0x01", "0x01"),),
        "optimal": (("raw", "0x30", "0x30", "0x01", "0x01"),),
        "full": (
            ("raw", "0x30", "0x30", "0x01", "0x00"),
            ("raw", "0x30", "0x30", "0x02", "0xff", "0x64"),
        ),
    },
)

ADAPTERS: tuple[FanAdapter, ...] = (DELL, SUPERMICRO)


def select_adapter(board: BoardIdentity) -> FanAdapter:
    for adapter in ADAPTERS:
        if adapter.matches(board):
            return adapter
    known = "; ".join(a.name for a in ADAPTERS)
    raise UnknownBoard(
        f"unknown board ({board.describe()}): no fan adapter knows it, so no raw IPMI command "
        f"is sent (adapters: {known})"
    )


def fan_plan(
    mc_info: str, fru: str | None, profile: str, current_output: str | None = None,
    last_applied: str | None = None,
) -> dict:  # fmt: skip
    """What the role does for `profile`: {adapter, vendor, board, current, changed, commands,
    read_command, refused}. `current_output` is the read command's output (when the adapter has
    one); otherwise `last_applied` (the role's state file) stands in for it."""
    if profile not in PROFILES:
        raise UnsupportedProfile(f"unknown fan profile {profile!r}; one of {', '.join(PROFILES)}")
    board = identify(mc_info, fru)
    result: dict = {
        "board": board.describe(), "adapter": None, "vendor": None, "current": None,
        "changed": False, "commands": [], "read_command": None, "refused": None,
    }  # fmt: skip
    try:
        adapter = select_adapter(board)
        commands = adapter.commands_for(profile)
    except (UnknownBoard, UnsupportedProfile) as error:
        result["refused"] = str(error)
        return result
    current = (
        adapter.current_profile(current_output or "") if adapter.read_command else last_applied
    )
    if adapter.read_command is None and current is not None:
        current = current.strip() or None
    changed = current != profile
    result.update(
        adapter=adapter.name,
        vendor=adapter.vendor,
        read_command=list(adapter.read_command) if adapter.read_command else None,
        current=current,
        changed=changed,
        commands=[list(c) for c in commands] if changed else [],
    )
    return result
