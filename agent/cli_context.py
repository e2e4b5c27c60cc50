"""What one agent run reports its failure through, and what it keeps out of every line it writes.

`context` is set as soon as the flags that name the sinks are parsed: the termination log,
the progress record, the token and the other secrets read from files (scrubbed from every
log line and failure record), and the Kubernetes API factories (tests inject stand-ins).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from fleetcache.agent.cli_options import DEFAULT_TERMINATION_LOG, bad
from fleetcache.agent.progress import ConfigMapSink, FileSink, Progress, parse_configmap_ref

log = logging.getLogger("fleetcache.agent")

# Where a failure is reported; set as soon as the flags that name the sinks are parsed.
context: dict = {"termination": Path(DEFAULT_TERMINATION_LOG), "progress": None, "token": None, "secrets": (),
                 "interrupted": None}


def read_token(path: str | None) -> str | None:
    """Read once. HF_TOKEN in the environment is deliberately ignored: env vars leak into pod specs."""
    if path is None:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as err:
        raise bad("--token-file", f"cannot read it ({type(err).__name__})") from None
    if not token or any(c.isspace() for c in token):
        raise bad("--token-file", "is empty or not a single token")
    context["token"] = token
    setup_logging(token)
    return token


class _Redact(logging.Filter):
    def __init__(self, secret: str):
        super().__init__()
        self.secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = record.getMessage().replace(self.secret, "[redacted]")
        record.args = None
        return True


def hide(secrets: tuple[str, ...]) -> None:
    """Credentials read from files (S3 keys) are scrubbed from every log line and failure record."""
    context["secrets"] = (*context["secrets"], *secrets)
    for handler in log.handlers:
        for secret in secrets:
            handler.addFilter(_Redact(secret))


def setup_logging(token: str | None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    if token:
        handler.addFilter(_Redact(token))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


def open_progress(fields, progress_file: str | None, configmap: str | None) -> Progress:
    """The file sink first, so even a bad --progress-configmap gets its Failed record written."""
    progress = Progress([FileSink(Path(progress_file))] if progress_file else [], fields)
    context["progress"] = progress
    if configmap:
        namespace, name = parse_configmap_ref(configmap)
        progress.sinks.append(ConfigMapSink(namespace, name, api_factory=context["configmap_api"]))
    return progress
