"""`fleetcache hub`: the test hub serving one generated model repo until stopped, so the agent
can be tried by hand with no network and no cluster (README "Try the agent")."""

from __future__ import annotations

import errno
import re
import signal
import sys

import click

from fleetcache import quantity
from fleetcache.devtools.testhub.content import make_model
from fleetcache.devtools.testhub.server import TestHub

# ORG/NAME, as the Hub spells a model repo; the hub routes on exactly two path segments.
REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
BRANCH = re.compile(r"[\w.-]+(/[\w.-]+)*")
MAX_SIZE = 64 << 30  # every byte is hashed once at start, at about 1 GB/s
EXIT_BAD_INPUT = 2


class HubInputError(ValueError):
    """A flag the hub cannot serve: one line naming it and the fix."""


def repo_name(repo: str) -> str:
    if not REPO.fullmatch(repo) or ".." in repo:
        raise HubInputError(f"--repo {repo!r}: give ORG/NAME, e.g. acme/tiny")
    return repo


def branch(revision: str) -> str:
    if not BRANCH.fullmatch(revision) or ".." in revision:
        raise HubInputError(f"--revision {revision!r}: give a branch name, e.g. main")
    return revision


def size_in_bytes(size: str) -> int:
    """--size as whole bytes: a positive Kubernetes quantity, parsed as the agent parses one."""
    try:
        value = quantity.parse(size)
    except quantity.QuantityError as err:
        raise HubInputError(f"--size {size!r} {err}: give a quantity like 12Mi or 1G") from None
    if not 1 <= value <= MAX_SIZE:
        raise HubInputError(f"--size {size!r}: give from one byte to 64Gi, e.g. 12Mi or 1G")
    return int(value)


def banner(hub: TestHub, repo: str, revision: str, commit: str, private: bool) -> str:
    """What a user needs to point the agent at the repo, a few aligned lines."""
    files = hub.repos[repo].commits[commit]
    shards = sum(f.lfs for f in files.values())
    total = sum(f.content.size for f in files.values())
    access = "private: readable with --token-file holding the token" if private else "public"
    return "\n".join([
        f"endpoint  {hub.endpoint}",
        f"repo      {repo} ({access})",
        f"revision  {revision}",
        f"commit    {commit}",
        f"files     {len(files)}, {total} bytes ({shards} safetensors shards redirected to a CDN host)",
        "serving until Ctrl-C (or SIGTERM)",
    ])


@click.command()
@click.option("--repo", required=True, help="ORG/NAME of the model repo to serve, e.g. acme/tiny.")
@click.option("--size", required=True,
              help="About how many bytes the repo holds, a Kubernetes quantity (12Mi, 1G); generated on the "
                   "fly, so a large repo costs no memory, only the time to hash it once at start.")
@click.option("--shards", default=2, show_default=True, type=click.IntRange(1, 64),
              help="How many safetensors weight files share the size (LFS files, redirected to the CDN host); "
                   "beside them the repo holds config, tokenizer and index JSON.")
@click.option("--revision", default="main", show_default=True, help="The branch that names the commit.")
@click.option("--port", default=0, type=click.IntRange(0, 65535),
              help="The hub's port on 127.0.0.1 (default: any free one).")
@click.option("--token", help="Serve the repo private, readable only with this token.")
def hub(repo: str, size: str, shards: int, revision: str, port: int, token: str | None) -> None:
    """Serve a generated model repo over the Hugging Face Hub's HTTP API on 127.0.0.1, print
    the endpoint, repo, revision and commit, and run until Ctrl-C or SIGTERM."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a `kill` stops it as Ctrl-C does
    server = TestHub(port=port)
    try:
        name = repo_name(repo)
        commit = server.add_repo(name, make_model(size_in_bytes(size), shards=shards), revision=branch(revision),
                                 private=token is not None)
        if token is not None:
            server.add_token(token, repos=(name,))
        start(server, port)
        click.echo(banner(server, name, revision, commit, token is not None))
        while True:
            signal.pause()
    except HubInputError as err:
        click.echo(f"fleetcache hub: {err}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        click.echo("stopped")
    finally:
        server.stop()


def start(server: TestHub, port: int) -> None:
    """The hub listening, or why --port cannot be used."""
    try:
        server.start()
    except OSError as err:
        why = "is in use" if err.errno == errno.EADDRINUSE else f"cannot be listened on ({err.strerror})"
        raise HubInputError(f"--port {port} {why}: pick another, or leave --port out for any free one") from None
