"""Sizes as fleetcache reads and writes them: a spec quantity in bytes (naming the field
on error), the cache volume's size for a model, and bytes for people."""

from __future__ import annotations

import math
from typing import Any

from fleetcache import quantity
from fleetcache.apis.specs import InputError
from fleetcache.messages import shown

GiB = 1024**3
HEADROOM = 1.10


def quantity_bytes(value: Any, field_path: str) -> int:
    """Bytes of a Kubernetes quantity (bounded cost, see fleetcache.quantity), or
    InputError naming the field."""
    try:
        parsed = quantity.to_bytes(value)
    except quantity.QuantityError as err:
        raise InputError(f"{field_path}: {shown(value)} {err}; write it like 20Gi or 500G") \
            from err
    if parsed <= 0:
        raise InputError(f"{field_path}: {shown(value)} must be greater than zero")
    return parsed


def volume_size_for(model_bytes: int) -> str:
    """Resolved bytes x 1.10, rounded up to whole GiB (DESIGN.md §3), at least 1Gi."""
    return f"{max(1, math.ceil(model_bytes * HEADROOM / GiB))}Gi"


def human_bytes(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{count}B"
