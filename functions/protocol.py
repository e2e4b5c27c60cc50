"""What a composer sees and returns: plain dicts in, plain dicts out.

The server (functions/server.py) translates both to and from protobuf, so a composer
never touches the wire format and its tests are plain tables."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from fleetcache.functions.read import get_path


@dataclass
class Request:
    """What a composer sees: the composite, composed and required resources, and `now`."""

    composite: dict
    observed: dict[str, dict] = field(default_factory=dict)
    required: dict[str, list[dict]] = field(default_factory=dict)
    now: datetime.datetime = field(
        default_factory=lambda: datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    )

    @property
    def name(self) -> str:
        return str(get_path(self.composite, "metadata.name") or "")

    @property
    def namespace(self) -> str:
        return str(get_path(self.composite, "metadata.namespace") or "")

    @property
    def spec(self) -> dict:
        spec = self.composite.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def status(self) -> dict:
        status = self.composite.get("status")
        return status if isinstance(status, dict) else {}


@dataclass(frozen=True)
class Requirement:
    """A resource the composer needs Crossplane to fetch (by name or all of a kind)."""

    api_version: str
    kind: str
    match_name: str | None = None
    namespace: str | None = None
    match_labels: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""


@dataclass
class Outcome:
    """What a composer returns; `ready` of each desired resource is True, False or None.

    warnings and notices become Warning and Normal results, which Crossplane records as
    events of that type on the composite; requeue_after asks to be called again within that
    many seconds (a bake ending, a deadline passing) rather than at the default TTL."""

    desired: dict[str, tuple[dict, bool | None]] = field(default_factory=dict)
    status: dict = field(default_factory=dict)
    conditions: list[Condition] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    requirements: dict[str, Requirement] = field(default_factory=dict)
    composite_ready: bool | None = None
    requeue_after: float | None = None
    fatal: str | None = None

    def compose(self, key: str, resource: dict, ready: bool | None = None) -> None:
        self.desired[key] = (resource, ready)

    def condition(self, type_: str, status: bool | str, reason: str, message: str = "") -> None:
        value = status if isinstance(status, str) else ("True" if status else "False")
        self.conditions.append(Condition(type_, value, reason, message))

    def require(self, key: str, requirement: Requirement) -> None:
        self.requirements[key] = requirement
