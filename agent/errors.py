"""The agent's one failure type: every failure carries its row of the shared exit-code table.

The CLI turns an AgentError into the exit code, the final progress record and the
termination message, so the reason a user sees always comes from fleetcache.exitcodes, and
the remedy too unless the case has its own because the row's would mislead (verify, run by
hand, on a volume no fetch has completed).
"""

from __future__ import annotations

import errno

from fleetcache import reasons
from fleetcache.exitcodes import BY_REASON, ExitCode

MAX_WHAT = 1000  # with the remedy, a record stays well inside a 4096-byte termination message


def ellipsized(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, the last one an ellipsis when anything was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class AgentError(Exception):
    def __init__(self, reason: str, what: str, remedy: str | None = None):
        self.row: ExitCode = BY_REASON[reason]
        self.what = ellipsized(what, MAX_WHAT)
        self.remedy = remedy or self.row.remedy
        super().__init__(f"{reason}: {what}")

    @property
    def code(self) -> int:
        return self.row.code

    @property
    def reason(self) -> str:
        return self.row.reason

    @property
    def message(self) -> str:
        """Short what-happened plus the remedy, as written to progress and the termination log."""
        return f"{self.what.rstrip('.')}. {self.remedy}"


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: not a failure of the source, so not a row of the exit-code table.

    A BaseException, so no `except Exception` on the way up mistakes it for a failure."""

    REASON = reasons.Interrupted

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def code(self) -> int:
        return 128 + self.signum


def os_reason(err: OSError) -> str:
    """What the system said, with its errno name: `Permission denied (EACCES)`."""
    name = errno.errorcode.get(err.errno or 0)
    said = err.strerror or type(err).__name__
    return f"{said} ({name})" if name else said


def from_os_error(err: OSError, where: str) -> AgentError | None:
    """Disk errors the table names: a full volume (13) or one the agent may not write (15),
    naming the path and the system's reason."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return AgentError(reasons.InsufficientCapacity, f"the volume ran out of space writing {where}")
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        path = f" ({err.filename})" if err.filename and str(err.filename) not in where else ""
        return AgentError(reasons.InvalidConfiguration, f"cannot write {where}{path}: {os_reason(err)}: pass a "
                                                        "directory the agent can write (in a cluster, check the "
                                                        "volume mount and the pod's fsGroup)")
    return None
