"""The kernel clock's synchronisation state, read with adjtimex(2): the time_sync probe's reading
when `timedatectl` cannot answer (no D-Bus in a container, no systemd as PID 1).

    clock = read_kernel_clock()     # KernelClock(state, status, maxerror_us, esterror_us)

systemd-timedated answers NTPSynchronized from this same call (src/timedate/timedated.c,
ntp_synced()), so this is what timedatectl would have said, without D-Bus. A call with modes 0
only reads: no privilege is needed, and in a container it reads the host kernel's clock, the
one the container's processes use. stdlib only (ctypes): it runs with the node's python3.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass


class _Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class _Timex(ctypes.Structure):
    """struct timex of <sys/timex.h> (glibc, Linux), every field, so the kernel's write fits."""

    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long),
        ("time", _Timeval),
        ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long),
        ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long),
        ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long),
        ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int),
        ("_reserved", ctypes.c_int * 11),
    ]


@dataclass(frozen=True)
class KernelClock:
    state: int  # adjtimex's return: TIME_OK 0 ... TIME_ERROR 5 (unsynchronised)
    status: int  # STA_* flags (STA_UNSYNC 0x0040)
    maxerror_us: int  # the kernel's maximum error estimate, microseconds
    esterror_us: int


def read_kernel_clock() -> KernelClock:
    """adjtimex(2) with modes 0 (read only); OSError when the call is not there or fails."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        adjtimex = libc.adjtimex
    except (OSError, AttributeError) as error:
        raise OSError(f"adjtimex not available: {error}") from None
    timex = _Timex()
    state = adjtimex(ctypes.byref(timex))
    if state < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"adjtimex failed: {os.strerror(number)}")
    return KernelClock(state, timex.status, timex.maxerror, timex.esterror)
