"""Times and durations as Kubernetes writes them (RFC 3339 in UTC), read totally."""

from __future__ import annotations

import datetime
from typing import Any

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # RFC 3339 in UTC, as Kubernetes writes times


def parse_time(value: Any) -> datetime.datetime | None:
    """An RFC 3339 time read from a spec or status, in UTC; None when absent or malformed."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(datetime.UTC) if parsed.tzinfo else None


def format_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime(TIME_FORMAT)


DURATION_UNITS = {"h": datetime.timedelta(hours=1), "m": datetime.timedelta(minutes=1)}


def duration(value: str) -> datetime.timedelta:
    """A spec duration the XRD's pattern already checked: whole hours (`168h`) or
    minutes (`30m`)."""
    return int(value[:-1]) * DURATION_UNITS[value[-1]]


def hour_of(moment: datetime.datetime) -> str:
    """`moment` truncated to the hour: use is tracked at hour granularity, so a status
    changes at most once an hour for a decision that cannot tell minutes apart."""
    return format_time(moment.replace(minute=0, second=0, microsecond=0))


def seconds_of(value: Any) -> float | None:
    """An RFC 3339 time from a status as seconds since the epoch; None when absent or
    malformed (decisions reckon in seconds, statuses in RFC 3339)."""
    moment = parse_time(value)
    return moment.timestamp() if moment else None


def time_at(seconds: float) -> str:
    """Seconds since the epoch as an RFC 3339 time in UTC, as a status carries it."""
    return format_time(datetime.datetime.fromtimestamp(seconds, datetime.UTC))
