"""Input quoted in a message, bounded: a status, condition or log line never carries a
hostile value whole."""

from __future__ import annotations

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
