"""Input quoted in a message, bounded: a status, condition or log line never carries a
hostile value whole."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SHOWN_LIMIT = 200
MESSAGE_LIMIT = 1024  # a whole message (condition, result, warning): a few shown values


def clipped(text: Any, limit: int = SHOWN_LIMIT) -> str:
    """Free text from input (a record's message, a Job's message) as put into a message:
    cut to `limit` characters, so a message never carries a hostile value whole."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown(value: Any, limit: int = SHOWN_LIMIT) -> str:
    """Input quoted in a message: its repr, cut to `limit` characters, so a message never
    echoes a hostile value whole."""
    return clipped(repr(value) if not isinstance(value, (dict, list)) else type(value).__name__,
                   limit)


NAMED_IN_MESSAGE = 10  # names a message spells out by default (a ModelCache's clusters)
NAME_SHOWN = 63  # characters of each name spelled out: a Kubernetes label's length


def named(names: Sequence[str], first: int = NAMED_IN_MESSAGE, each: int | None = NAME_SHOWN) -> str:
    """Names spelled out in a message: the first `first`, each clipped to `each` characters
    (None: whole), then how many more ("a, b and 3 more")."""
    shown_names = ", ".join(n if each is None else clipped(n, each) for n in names[:first])
    more = len(names) - first
    return f"{shown_names} and {more} more" if more > 0 else shown_names


def counted(count: int, noun: str, plural: str = "") -> str:
    """A count and its noun in the right number ("1 cluster", "3 clusters"; `plural` when
    it is not noun + "s": "0 copies"): every message that counts says it this one way."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
