"""The node tier's commands (design/node-tier.md): `node-warm`, `node-ready`, `node-prepare`,
`node-label` and `select`.

Each reads its flags (cli_options.py) and hands the work to node_warm.py, node_agent.py or
select.py; cli.py turns whatever they raise into the exit code and final record.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import click

from fleetcache.agent.cli_context import context
from fleetcache.agent.cli_options import (
    DEFAULT_TERMINATION_LOG,
    bad,
    check_commit,
    check_dest,
    check_digest,
    check_repo,
    check_seconds,
)
from fleetcache.agent.node_agent import FileLabels, NodeLabels
from fleetcache.agent.node_agent import label as run_label
from fleetcache.agent.node_agent import prepare as run_prepare
from fleetcache.agent.node_warm import (
    PRUNE_ENV,
    STATUS_INTERVAL_ENV,
    KeyedSink,
    NodeRecorder,
    RecordPruner,
    StatusFileSink,
    Warm,
    copy_ready,
    env_seconds,
)
from fleetcache.agent.node_warm import run as run_node_warm
from fleetcache.agent.progress import ConfigMapSink, parse_configmap_ref, write_termination
from fleetcache.agent.select import select as run_select
from fleetcache.agent.slots import DirSlots, LeaseSlots, NamedLease
from fleetcache.shapes import is_object_name

log = logging.getLogger("fleetcache.agent")

AGENT_INTERVAL_ENV = "FLEETCACHE_NODE_AGENT_INTERVAL"  # seconds between node-prepare and node-label passes (30)
PRUNE_LEASE_SECONDS = 900  # three pruning periods: a dead pruner is replaced within 15 minutes


@click.command("node-warm")
@click.option("--source", required=True, help="the cluster volume's root (where fetch wrote hub/)")
@click.option("--dest", required=True, help="this node's copy: <nodeCache.path>/<ns>/<cache>")
@click.option("--repo", required=True)
@click.option("--commit", required=True)
@click.option("--manifest-digest", required=True)
@click.option("--node", required=True, help="the node's name: the key of its status record")
@click.option("--status-configmap", help="NAMESPACE/NAME: merge-patch the record into key <node>")
@click.option("--status-file", help='JSON {"<node>": record}, the simulation stand-in')
@click.option("--slots-namespace", help="take a warm slot from Leases node-warm-slot-* there")
@click.option("--slots-dir", help="take a warm slot by flock on slot-<i> files there")
@click.option("--holder", help="slot holder identity (default <node>:<dest>)")
@click.option("--prune-selector", help="label selector of the warmer pods: prune records of nodes without one")
@click.option("--pruner-lease", help="the Lease (in the status ConfigMap's namespace) electing one pruner")
@click.option("--keep", "keep", multiple=True,
              help="another commit to keep on the node, repeatable; given, the repo's other commits are pruned "
                   "once this one is Ready")
@click.option("--manifest-file", help="an existing volume's manifest (JSON list): its files are flat at --source")
@click.option("--ready-file", help="touched while the copy is Ready")
@click.option("--attempt-timeout", help="seconds one copy attempt may take")
@click.option("--retries", default="3", show_default=True)
@click.option("--once", is_flag=True, help="exit when Ready (0) or failed (its exit code)")
@click.option("--termination-log", default=DEFAULT_TERMINATION_LOG, show_default=True)
def node_warm(source, dest, repo, commit, manifest_digest, node, status_configmap, status_file, slots_namespace,
              slots_dir, holder, prune_selector, pruner_lease, keep, manifest_file, ready_file, attempt_timeout,
              retries, once, termination_log) -> None:
    """Copy REPO@COMMIT from the cluster volume to this node, every byte hashed; node-ready.json last."""
    context["termination"] = Path(termination_log)
    sinks: list[StatusFileSink | KeyedSink] = []
    if status_file and status_configmap:
        raise bad("--status-file", "give --status-configmap or --status-file, not both")
    if status_file:
        sinks.append(StatusFileSink(Path(status_file), node))
    recorder = NodeRecorder(sinks, commit, float(os.environ.get(STATUS_INTERVAL_ENV, "30")))
    context["progress"] = recorder
    if status_configmap:
        namespace, name = parse_configmap_ref(status_configmap)
        sinks.append(KeyedSink(ConfigMapSink(namespace, name, api_factory=context["configmap_api"]), node))
    check_repo(repo)
    check_commit(commit)
    check_digest(manifest_digest)
    if not is_object_name(node):
        raise bad("--node", f"{node!r} is not a node name")
    if slots_namespace and slots_dir:
        raise bad("--slots-dir", "give --slots-namespace or --slots-dir, not both")
    if not retries.isdigit() or int(retries) > 100:
        raise bad("--retries", f"{retries!r} is not a whole number from 0 to 100")
    if bool(prune_selector) != bool(pruner_lease) or (prune_selector and not status_configmap):
        raise bad("--prune-selector", "record pruning needs --prune-selector, --pruner-lease and --status-configmap")
    for kept in keep:
        check_commit(kept, "--keep")
    holder = holder or f"{node}:{dest}"
    if prune_selector and not once:
        namespace, name = parse_configmap_ref(status_configmap)
        lease = NamedLease(context["coordination_api"](), namespace, pruner_lease, holder, PRUNE_LEASE_SECONDS)
        RecordPruner(context["configmap_api"](), lease, namespace, name, prune_selector).start(
            float(os.environ.get(PRUNE_ENV, "300")))
    slots = DirSlots(Path(slots_dir), holder) if slots_dir else \
        LeaseSlots(context["coordination_api"](), slots_namespace, holder) if slots_namespace else None
    warm = Warm(Path(source), check_dest(dest), repo, commit, manifest_digest, recorder, slots,
                Path(ready_file) if ready_file else None, check_seconds("--attempt-timeout", attempt_timeout),
                frozenset(keep) if keep else None, Path(manifest_file) if manifest_file else None)
    click.echo(json.dumps(run_node_warm(warm, once, int(retries)), sort_keys=True))


@click.command("node-ready")
@click.option("--dest", required=True)
@click.option("--commit", required=True)
@click.option("--manifest-digest")
def node_ready(dest, commit, manifest_digest) -> int:
    """Exit 0 iff the node copy of COMMIT (and digest) is published: the warmer's readiness probe."""
    ready = copy_ready(Path(dest), check_commit(commit), check_digest(manifest_digest, required=False))
    return 0 if ready else 1


@click.command("node-prepare")
@click.option("--root", required=True, help="nodeCache.path as mounted in the prepare container")
@click.option("--keep-file", required=True, help="keep.json from the fleetcache-node-dirs ConfigMap")
@click.option("--once", is_flag=True)
def node_prepare(root, keep_file, once) -> None:
    """Create placed caches' directories (uid 65532, node-check.json); delete expired ones. CHOWN only."""
    _passes(once, lambda: click.echo(json.dumps(run_prepare(Path(root), Path(keep_file)), sort_keys=True)))


@click.command("node-label")
@click.option("--root", required=True)
@click.option("--node", required=True, help="this node's name (the only Node it patches)")
@click.option("--keep-file", required=True)
@click.option("--labels-file", help="a JSON {key: value} file instead of the Node (simulation)")
@click.option("--once", is_flag=True)
def node_label(root, node, keep_file, labels_file, once) -> None:
    """Label this node node-cache.fleetcache.dev/<k>=<commit> for each ready placed cache; remove the rest."""
    labels = FileLabels(Path(labels_file)) if labels_file else NodeLabels(context["node_api"](), node)

    def one_pass() -> None:
        try:
            click.echo(json.dumps(run_label(Path(root), Path(keep_file), labels), sort_keys=True))
        except Exception as err:  # noqa: BLE001 - an API outage: the next pass retries
            if once:
                raise
            log.warning("could not label node %s (%s %s); retrying", node, type(err).__name__,
                        getattr(err, "status", "") or "")

    _passes(once, one_pass)


def _passes(once: bool, one_pass) -> None:
    """One pass, then (without --once) another every FLEETCACHE_NODE_AGENT_INTERVAL seconds (30)."""
    while True:
        one_pass()
        if once:
            return
        time.sleep(env_seconds(AGENT_INTERVAL_ENV, 30.0))


@click.command("select")
@click.option("--node", "node_root", required=True, help="the node PVC's mount (read-only)")
@click.option("--volume", required=True, help="the cluster PVC's mount (read-only)")
@click.option("--repo", required=True)
@click.option("--commit", required=True)
@click.option("--manifest-digest", required=True)
@click.option("--link", required=True, help="the symlink to write, e.g. /var/run/fleetcache/cache")
@click.option("--termination-log", default=DEFAULT_TERMINATION_LOG, show_default=True)
def select_command(node_root, volume, repo, commit, manifest_digest, link, termination_log) -> None:
    """Point LINK at the node copy's hub/ if published for COMMIT and digest, else at the volume's."""
    context["termination"] = Path(termination_log)
    record = run_select(Path(node_root), Path(volume), check_repo(repo), check_commit(commit),
                        check_digest(manifest_digest), Path(link))
    log.info("delivery %s (%s)", record["delivery"], record["reason"])
    write_termination(Path(termination_log), record)
    click.echo(json.dumps(record, sort_keys=True))
