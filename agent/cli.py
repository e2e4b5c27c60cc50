"""`fleetcache-agent`: the command group, and how every run ends (DESIGN §4).

Every failure, including a bad flag, ends the same way: the exit code of its row in
fleetcache.exitcodes, a final progress record (phase Failed, reason, message with the
remedy) and the termination message. The token is read once from --token-file and
scrubbed from every log line; records and messages never include it.

The commands are in cache_commands.py (resolve, fetch, verify, prune), node_commands.py
(the node tier) and image_commands.py (the engine images); their flags' checks in cli_options.py;
where a failure is reported in cli_context.py.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

import click

from fleetcache import reasons
from fleetcache.agent.cache_commands import fetch, prune, resolve, verify
from fleetcache.agent.cli_context import context, open_progress, setup_logging
from fleetcache.agent.cli_options import DEFAULT_TERMINATION_LOG
from fleetcache.agent.errors import AgentError, Interrupted, from_os_error
from fleetcache.agent.image_commands import image_keep, image_slot, image_status, resolve_images
from fleetcache.agent.node_commands import node_label, node_prepare, node_ready, node_warm, select_command
from fleetcache.agent.progress import (
    FETCH_FIELDS,
    PRUNE_FIELDS,
    RESOLVE_FIELDS,
    RESOLVE_IMAGES_FIELDS,
    Progress,
    incluster_core_api,
    write_termination,
)
from fleetcache.agent.slots import incluster_coordination_api

log = logging.getLogger("fleetcache.agent")


@click.group()
def main_group() -> None:
    """Resolve, fetch, verify and prune model snapshots in a warm cache; keep engine images warm on nodes."""


for _command in (resolve, fetch, verify, prune, node_warm, node_ready, node_prepare, node_label, select_command,
                 resolve_images, image_slot, image_keep, image_status):
    main_group.add_command(_command)


def _flag(argv: list[str], name: str) -> str | None:
    """A flag's value read straight from argv, for reporting a usage error click raised before parsing."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1:]
    return None


def _usage_error(argv: list[str], err: click.UsageError) -> AgentError:
    termination = _flag(argv, "--termination-log")
    if termination:
        context["termination"] = Path(termination)
    progress_file = _flag(argv, "--progress-file")
    if progress_file and context["progress"] is None:
        fields = {"resolve": RESOLVE_FIELDS, "prune": PRUNE_FIELDS, "resolve-images": RESOLVE_IMAGES_FIELDS}
        open_progress(fields.get(argv[0] if argv else "", FETCH_FIELDS), progress_file, None)
    if isinstance(err, click.exceptions.NoArgsIsHelpError):  # click's answer would be the whole help
        return AgentError(reasons.InvalidConfiguration, f"no command given: run one of "
                                                        f"{', '.join(main_group.commands)} (fleetcache-agent --help)")
    command = " ".join(["fleetcache-agent", *argv[:1]]) if argv and argv[0] in main_group.commands \
        else "fleetcache-agent"
    return AgentError(reasons.InvalidConfiguration, f"{err.format_message().rstrip('.')} (see `{command} --help`)")


def _report(reason: str, message: str, code: int) -> int:
    """The end of every failure: a final Failed record to every sink and the termination message.

    The message is scrubbed of the token too, in case a server ever echoed it back."""
    for secret in (context["token"], *context["secrets"]):
        if secret:
            message = message.replace(secret, "[redacted]")
    progress: Progress | None = context["progress"]
    record = progress.fail(reason, message) if progress else {"phase": "Failed", "reason": reason,
                                                               "message": message}
    write_termination(context["termination"], record)
    return code


def _report_error(err: AgentError) -> int:
    log.error("%s (exit %d): %s", err.reason, err.code, err.message)
    return _report(err.reason, err.message, err.code)


def _report_unexpected(err: Exception) -> int:
    """A bug is not a row of the table: exit 1 with an empty reason, which composers treat as transient."""
    log.exception("unexpected failure")
    return _report("", f"unexpected {type(err).__name__}; see the agent's log", 1)


def _report_interrupted(sig: Interrupted) -> int:
    """One line, a final record with reason Interrupted, and 128+signal: the next run resumes."""
    name = signal.Signals(sig.signum).name
    progress: Progress | None = context["progress"]
    done = progress.record.get("bytesDone") if progress else None
    total = progress.record.get("bytesTotal") if progress else None
    kept = f" with {done} of {total} bytes on the volume" if done is not None and total else ""
    message = f"interrupted by {name}{kept}; the next run resumes from what is on the volume"
    log.warning("%s (exit %d)", message, sig.code)
    return _report(Interrupted.REASON, message, sig.code)


def _on_signal(signum: int, frame) -> None:
    """The first SIGINT/SIGTERM interrupts the main thread; later ones wait for that cleanup."""
    if context["interrupted"] is None:
        context["interrupted"] = signum
        raise Interrupted(signum)


def main(argv: list[str] | None = None, configmap_api=None, coordination_api=None,
         node_api=None) -> int:
    """Entry point; tests inject stand-ins: `configmap_api` and `node_api` (CoreV1Api factories),
    `coordination_api` (a CoordinationV1Api factory, for the warm slots)."""
    context.update(termination=Path(DEFAULT_TERMINATION_LOG), progress=None, token=None, secrets=(), interrupted=None,
                   configmap_api=configmap_api or incluster_core_api,
                   coordination_api=coordination_api or incluster_coordination_api,
                   node_api=node_api or incluster_core_api)
    setup_logging(None)
    code = 0
    args = sys.argv[1:] if argv is None else argv
    # Signal handlers can only be set from the main thread (the console script's; a test may differ).
    on_main = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.signal(signum, _on_signal) for signum in (signal.SIGINT, signal.SIGTERM)} \
        if on_main else {}
    try:
        try:
            result = main_group.main(args=args, prog_name="fleetcache-agent", standalone_mode=False)
            code = result if isinstance(result, int) else 0  # node-ready answers with its exit code
        finally:  # from here on a signal no longer interrupts: the failure being reported wins
            context["interrupted"] = context["interrupted"] or signal.SIGTERM
    except Interrupted as sig:
        code = _report_interrupted(sig)
    except click.UsageError as err:
        code = _report_error(_usage_error(args, err))
    except AgentError as err:
        code = _report_error(err)
    except OSError as err:
        mapped = from_os_error(err, "under --dest")
        code = _report_error(mapped) if mapped else _report_unexpected(err)
    except Exception as err:  # noqa: BLE001 - a bug still ends with a Failed record
        code = _report_unexpected(err)
    finally:
        if context["progress"] is not None:
            context["progress"].close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if argv is None:
        sys.exit(code)
    return code
