"""The engine images' commands (design/agent.md, "Engine images"): `resolve-images`, `image-slot`,
`image-keep` and `image-status`.

Each reads its flags and hands the work to image_pins.py, image_keeper.py or image_reporter.py;
cli.py turns whatever they raise into the exit code and final record. The three that run for the
life of a pod end with exit 0 on SIGTERM: being stopped is how they are meant to end.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path

import click

from fleetcache.agent.cli_context import context, hide, open_progress
from fleetcache.agent.cli_options import DEFAULT_TERMINATION_LOG, bad, check_seconds
from fleetcache.agent.errors import Interrupted, os_reason
from fleetcache.agent.hub import RetryPolicy, read_timeout_from_env
from fleetcache.agent.image_keeper import DEFAULT_PULL_DEADLINE, held, hold_for_pulls, idle, write_done
from fleetcache.agent.image_pins import image_client, pin
from fleetcache.agent.image_reporter import (
    DEFAULT_INTERVAL,
    INTERVAL_ENV,
    ApiPods,
    ConfigMapStatus,
    FilePods,
    FileStatus,
    Reporter,
)
from fleetcache.agent.node_warm import SLOT_POLL_ENV, env_seconds
from fleetcache.agent.progress import RESOLVE_IMAGES_FIELDS
from fleetcache.agent.slots import DirSlots, LeaseSlots

log = logging.getLogger("fleetcache.agent")


@click.command("resolve-images")
@click.option("--image", "images", multiple=True,
              help="an image by tag or digest (HOST/REPOSITORY:TAG or ...@sha256:HEX), repeatable")
@click.option("--registry-config", "registry_configs", multiple=True,
              help="a Docker config JSON with registries' credentials, repeatable: for each image the first "
                   "that has credentials for its registry is used")
@click.option("--plain-http", is_flag=True, help="talk to the registries over http (a registry on loopback)")
@click.option("--progress-file")
@click.option("--progress-configmap", help="NAMESPACE/NAME")
@click.option("--termination-log", default=DEFAULT_TERMINATION_LOG, show_default=True)
def resolve_images(images, registry_configs, plain_http, progress_file, progress_configmap, termination_log) -> None:
    """Pin each IMAGE to the digest its registry serves now; print {images: [{image, digest}]}."""
    context["termination"] = Path(termination_log)
    progress = open_progress(RESOLVE_IMAGES_FIELDS, progress_file, progress_configmap)
    if not images:
        raise bad("--image", "missing: give each image by tag or digest (HOST/REPOSITORY:TAG), repeatable")
    policy = dataclasses.replace(RetryPolicy.from_env(), report=progress.note)
    # Every reference is read before the first request, so a malformed one fails at once.
    clients = [image_client(image, registry_configs, plain_http, policy, read_timeout_from_env(), hide)
               for image in images]
    progress.phase("Resolving")
    record = {"images": [pin(image, client).as_record() for image, client in zip(images, clients, strict=True)]}
    progress.phase("Resolved", **record)
    click.echo(json.dumps(record, sort_keys=True))


def _state(state: str) -> Path:
    path = Path(state)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise bad("--state", f"cannot create {state!r}: {os_reason(err)}: pass the keeper pod's shared "
                             "emptyDir mount") from None
    return path


@click.command("image-slot")
@click.option("--state", required=True, help="the directory the keeper pod's agent containers share")
@click.option("--held", "probe", is_flag=True, help="exit 0 iff a slot is held or the pulls are done (the probe)")
@click.option("--slots-namespace", help="take a warm slot from Leases node-warm-slot-* there")
@click.option("--slots-dir", help="take a warm slot by flock on slot-<i> files there (the simulation)")
@click.option("--holder", help="slot holder identity: NAMESPACE/CACHE/NODE")
@click.option("--pull-deadline", default=str(int(DEFAULT_PULL_DEADLINE)), show_default=True,
              help="seconds the slot is held at most while the pulls run")
def image_slot(state, probe, slots_namespace, slots_dir, holder, pull_deadline) -> int:
    """Hold a warm slot while the node pulls the engine images, then idle until stopped."""
    if probe:
        for flag, value in (("--slots-namespace", slots_namespace), ("--slots-dir", slots_dir), ("--holder", holder)):
            if value:
                raise bad(flag, "not with --held: the probe only reads --state")
        return 0 if held(Path(state)) else 1
    if bool(slots_namespace) == bool(slots_dir):
        raise bad("--slots-namespace", "give --slots-namespace (the Leases' namespace) or --slots-dir, exactly one")
    if not holder:
        raise bad("--holder", "missing: give NAMESPACE/CACHE/NODE, the slot's holder identity")
    deadline = check_seconds("--pull-deadline", pull_deadline) or DEFAULT_PULL_DEADLINE
    state_dir = _state(state)
    slots = DirSlots(Path(slots_dir), holder) if slots_dir else \
        LeaseSlots(context["coordination_api"](), slots_namespace, holder)
    try:
        ended = hold_for_pulls(state_dir, slots, deadline, env_seconds(SLOT_POLL_ENV, 2.0))
        log.info("the pulls no longer hold a warm slot (%s); idling until stopped", ended)
        idle()
    except Interrupted:
        pass
    return 0


@click.command("image-keep")
@click.option("--state", required=True, help="the directory the keeper pod's agent containers share")
def image_keep(state) -> int:
    """Say the pulls are done (every pull-<i> exited 0 before this container started), then idle until stopped."""
    write_done(_state(state))
    log.info("every engine image is pulled; keeping them until stopped")
    try:
        idle()
    except Interrupted:
        pass
    return 0


def _configmap(value: str) -> tuple[str, str]:
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise bad("--configmap", f"{value!r} is not NAMESPACE/NAME")
    return namespace, name


@click.command("image-status")
@click.option("--namespace", required=True, help="the keeper pods' namespace")
@click.option("--selector", required=True, help="the keeper pods' label selector")
@click.option("--configmap", help="NAMESPACE/NAME: merge-patch the summary into its key status.json")
@click.option("--status-file", help='write {"status.json": summary} here instead (the simulation)')
@click.option("--pods-file", help='read {"pods": [...], "events": [...]} here instead of the API (the simulation)')
@click.option("--interval", help=f"seconds between passes (default ${INTERVAL_ENV}, else {int(DEFAULT_INTERVAL)})")
@click.option("--once", is_flag=True, help="one pass; print the summary")
def image_status(namespace, selector, configmap, status_file, pods_file, interval, once) -> int:
    """Summarize where the engine images stand on the keeper pods' nodes, every few seconds."""
    if bool(configmap) == bool(status_file):
        raise bad("--configmap", "give --configmap NAMESPACE/NAME or --status-file FILE, exactly one")
    target = _configmap(configmap) if configmap else None
    seconds = check_seconds("--interval", interval) or env_seconds(INTERVAL_ENV, DEFAULT_INTERVAL)
    core = None if pods_file and status_file else context["configmap_api"]()
    pods = FilePods(Path(pods_file)) if pods_file else ApiPods(core, namespace, selector)
    status = ConfigMapStatus(core, *target) if target else FileStatus(Path(status_file))
    reporter = Reporter(pods, status)
    if once:
        click.echo(reporter.once())
        return 0
    try:
        while True:
            reporter.safely()
            time.sleep(seconds if seconds > 0 else DEFAULT_INTERVAL)
    except Interrupted:
        pass
    return 0
