"""Kubernetes quantities, parsed with bounded cost.

`kubernetes.utils.quantity.parse_quantity` converts through `decimal.Decimal` with no
limit: `"1e999999999"` builds a billion-digit integer and freezes the single event loop
of the function server. Every quantity fleetcache reads (spec, status, a ConfigMap the
agent wrote, an agent flag) goes through `parse` here, which checks the shape and the
size first: at most `MAX_DIGITS` significant digits and an exponent of at most
`MAX_EXPONENT`, so the conversion is constant time. The XRDs carry the same shape as
their `pattern` (`PATTERN`), so the API server refuses what this refuses.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

MAX_DIGITS = 30
MAX_EXPONENT = 30
MAX_TEXT = 64

# The serialized form of resource.Quantity (k8s.io/apimachinery), without the sign:
# fleetcache never accepts a negative size.
PATTERN = r"^(\d+(\.\d*)?|\.\d+)([eE][+-]?\d{1,2}|[KMGTPE]i|[numkMGTPE])?$"
_SHAPE = re.compile(PATTERN)
_SUFFIX: dict[str, Decimal | int] = {
    "": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}


class QuantityError(ValueError):
    """Not a quantity fleetcache accepts; the message says why in a few words."""


def parse(value: Any) -> Decimal:
    """The exact value of a non-negative quantity (`20Gi`, `500M`, `1.5e9`, `100m`)."""
    if isinstance(value, bool):
        raise QuantityError("is not a quantity")
    if isinstance(value, int):
        value = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError("is not a finite number")
        value = repr(value)
    if not isinstance(value, str):
        raise QuantityError("is not a quantity")
    text = value.strip()
    if len(text) > MAX_TEXT:
        raise QuantityError(f"is longer than {MAX_TEXT} characters")
    match = _SHAPE.match(text)
    if not match:
        raise QuantityError("is not a Kubernetes quantity")
    number, suffix = match.group(1), match.group(3) or ""
    digits = number.replace(".", "").lstrip("0")
    if len(digits) > MAX_DIGITS:
        raise QuantityError(f"has more than {MAX_DIGITS} significant digits")
    if suffix not in _SUFFIX:  # an exponent (`1e9`), not the exa suffixes `E` and `Ei`
        exponent = int(suffix[1:])
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(f"has an exponent beyond {MAX_EXPONENT}")
        return Decimal(number).scaleb(exponent)
    return Decimal(number) * _SUFFIX[suffix]


def to_bytes(value: Any) -> int:
    """A quantity as whole bytes, rounded up (`1.5Ki` is 1536, `100m` is 1)."""
    return int(math.ceil(parse(value)))
