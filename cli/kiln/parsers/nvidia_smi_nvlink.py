"""`nvidia-smi nvlink --status` (`-s`): the state and speed of every NVLink of every GPU."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiln.parsers import ParseError

TOOL_NVLINK = "nvidia-smi nvlink --status"

_NVLINK_GPU = re.compile(r"^GPU (?P<index>\d+): .*$")
_NVLINK_LINK = re.compile(
    r"^\s+Link (?P<link>\d+): (?:(?P<inactive><inactive>)|(?P<speed>\d+(?:\.\d+)?) GB/s)\s*$"
)
# nvidia-smi's sentence for a GPU whose links are all inactive ("Unable to retrieve NVLink
# information as all links are inActive").
_NVLINK_NONE = "unable to retrieve nvlink information"


@dataclass(frozen=True, slots=True)
class NvlinkState:
    """One NVLink of one GPU. `speed_gbs` is the per-link rate nvidia-smi prints (GB/s, one
    direction: 25.781 on V100, 26.562 on H100); None for a link shown as `<inactive>`."""

    link: int
    active: bool
    speed_gbs: float | None


def parse_nvlink_status(text: str) -> dict[int, list[NvlinkState]]:
    """Parse `nvidia-smi nvlink --status` (`-s`): GPU index -> its links, in the order printed.

    GPU 0: NVIDIA H100 PCIe (UUID: GPU-6968dfc2-...)
    <TAB> Link 0: 26.562 GB/s
    <TAB> Link 4: <inactive>

    A GPU missing from the output has no key (the recorded bad V100 node lists GPUs 0-6 of 8),
    so compare the keys with the GPUs you expect. A GPU for which nvidia-smi says it cannot
    retrieve NVLink information has an empty list. Inactive links are not always a fault: a
    PCIe card with NVLink bridges uses only 12 of its 18 links.
    """
    result: dict[int, list[NvlinkState]] = {}
    links: list[NvlinkState] | None = None
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        gpu = _NVLINK_GPU.match(line)
        if gpu:
            index = int(gpu.group("index"))
            if index in result:
                raise ParseError(
                    TOOL_NVLINK, f"GPU {index} listed twice", line_no=line_no, line=line
                )
            links = result[index] = []
            continue
        link = _NVLINK_LINK.match(line)
        if link and links is not None:
            speed = link.group("speed")
            links.append(
                NvlinkState(
                    link=int(link.group("link")),
                    active=speed is not None,
                    speed_gbs=float(speed) if speed is not None else None,
                )
            )
            continue
        if links is not None and _NVLINK_NONE in line.lower():
            continue
        where = "before any 'GPU n:' line" if links is None else "not a link line"
        raise ParseError(TOOL_NVLINK, where, line_no=line_no, line=line)
    if not result:
        raise ParseError(TOOL_NVLINK, "no 'GPU n:' line")
    return result
