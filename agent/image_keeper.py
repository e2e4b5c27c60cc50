"""The image keeper pod's agent containers: the `slot` sidecar and the `keeper` (design/agent.md,
"Engine images").

The pulls of a node's engine images run as the keeper pod's init containers `pull-<i>`, after the
`slot` native sidecar's startup probe passed: so the sidecar takes one of the cluster's warm slots
(agent/slots.py, the Leases node-warm takes) and only then writes `<state>/slot`, which the probe
(`image-slot --held`) waits for. The `keeper` container starts once every pull exited 0 and writes
`<state>/done`; the sidecar then releases the slot, or after the pull deadline if the pulls hang.
Both then idle, so the pod, and the exited init containers in the runtime with it, keep the images
in use for the kubelet's image GC, until the pod is deleted.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from fleetcache.agent.disk import write_atomic
from fleetcache.agent.slots import Holding, take

log = logging.getLogger("fleetcache.agent")

SLOT_FILE = "slot"
DONE_FILE = "done"
DEFAULT_PULL_DEADLINE = 1800.0
IDLE_SECONDS = 3600.0


def held(state: Path) -> bool:
    """The sidecar's startup probe: a slot is held for the pulls, or they are done already."""
    return (state / SLOT_FILE).exists() or (state / DONE_FILE).exists()


def write_done(state: Path) -> None:
    write_atomic(state / DONE_FILE, json.dumps({"done": True}).encode())


class SlotWaiter:
    """Says who holds the slots each time that changes, not at every poll."""

    def __init__(self) -> None:
        self.said: list[str] | None = None

    def __call__(self, holders: list[str]) -> None:
        if holders != self.said:
            log.info("waiting for a warm slot; held by %s", ", ".join(holders) or "none")
            self.said = holders


def hold_for_pulls(state: Path, slots, deadline: float, poll: float,
                   clock: Callable[[], float] = time.monotonic) -> str:
    """Take a slot, mark it held, and keep it until the pulls are done, the deadline passes or the
    slot is lost; the slot is released whatever ends the wait (a signal too). Returns what ended it."""
    if (state / DONE_FILE).exists():
        return "done before"  # the sidecar restarted after the pulls: no slot needed
    holding: Holding = take(slots, SlotWaiter(), poll)
    try:
        write_atomic(state / SLOT_FILE, json.dumps({"slot": slots.name, "holder": slots.holder}).encode())
        ends = clock() + deadline
        while True:
            if (state / DONE_FILE).exists():
                return "done"
            if holding.lost.is_set():
                return "lost"
            if clock() >= ends:
                return "deadline"
            time.sleep(min(poll, max(ends - clock(), 0.0)))
    finally:
        holding.release()
        log.info("released warm slot")


def idle() -> None:
    """Until a signal ends the run (cli.py raises Interrupted from its handler)."""
    while True:
        time.sleep(IDLE_SECONDS)
