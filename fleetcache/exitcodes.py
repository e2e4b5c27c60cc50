"""The agent's exit codes: the view of the reasons registry (fleetcache/reasons.py) that the
agent and the composers share.

The agent exits with one of these codes and writes the reason and remedy into its progress
record and termination message; the composers turn the same code back into a status reason
and remedy, and the hydration Job's podFailurePolicy fails at once on the permanent ones.
A row is defined once, as a reason with an exit code; change it there and every part follows.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetcache.reasons import REGISTRY, Reason


@dataclass(frozen=True)
class ExitCode:
    code: int
    reason: Reason
    permanent: bool
    remedy: str


EXIT_CODES: tuple[ExitCode, ...] = tuple(sorted(
    (ExitCode(r.exit_code, r, bool(r.permanent), r.remedy) for r in REGISTRY.values() if r.exit_code is not None),
    key=lambda row: row.code))

BY_CODE: dict[int, ExitCode] = {row.code: row for row in EXIT_CODES}
BY_REASON: dict[str, ExitCode] = {row.reason: row for row in EXIT_CODES}
PERMANENT_CODES: tuple[int, ...] = tuple(row.code for row in EXIT_CODES if row.permanent)


def for_code(code: int) -> ExitCode | None:
    """The row for an exit code, or None for 0 and codes fleetcache never uses."""
    return BY_CODE.get(code)
