"""What an operator reads off the simulation: tables as `kubectl get` prints them, and every
object as one text (to look for a secret that leaked into it)."""

from __future__ import annotations

import json
from collections.abc import Iterable


def kubectl_table(rows: list[list[str]]) -> list[str]:
    """Rows aligned in columns, as `kubectl get` prints them (indented for the demo)."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip()
            for row in rows]


def all_text(resources: Iterable[dict]) -> str:
    return json.dumps(list(resources), sort_keys=True)
