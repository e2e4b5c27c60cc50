"""How full the volume is, measured the way kubelet reads a volume: statvfs of its mount path.

`capacityBytes` = f_blocks * f_frsize; `usedBytes` = capacity - f_bavail * f_frsize, so the
blocks reserved for root count as used: what is left for the agent is capacity - used. A
failed statvfs gives None for both (absent: not measured) and never fails the command.
"""

from __future__ import annotations

from os import statvfs
from pathlib import Path

UNMEASURED = {"usedBytes": None, "capacityBytes": None}


def volume_usage(dest: Path) -> dict:
    try:
        st = statvfs(dest)
    except OSError:
        return dict(UNMEASURED)
    capacity = st.f_blocks * st.f_frsize
    return {"usedBytes": capacity - st.f_bavail * st.f_frsize, "capacityBytes": capacity}
