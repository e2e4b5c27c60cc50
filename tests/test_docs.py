"""Every reason fleetcache reports is one entry of the registry (fleetcache/reasons.py), with
where a user sees it and its remedy; the README's troubleshooting table is made from it, and
the code names the entries instead of writing reasons as strings."""

from __future__ import annotations

import ast
import copy
import json
import pickle
import re
from pathlib import Path

import pytest
from google.protobuf import struct_pb2

from fleetcache import exitcodes, reasons
from fleetcache.agent import node_warm
from fleetcache.apis import xrds
from fleetcache.devtools import docs
from fleetcache.functions.k8s import hydration_objects

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# Names that are also a phase or a condition type: a literal of these is a reason only where
# the code gives a reason (see reason_literals).
ALSO_PHASES_OR_CONDITIONS = {"Admitted", "Available", "CapacityLow", "Degraded", "Evicted", "Hydrated",
                             "Hydrating", "Lapsed", "NodeCapacityLow", "OverQuota", "Resolved", "Resolving"}


def table_rows() -> dict[str, list[str]]:
    """reason -> its row's cells, from the README's generated section."""
    text = README.read_text()
    section = text[text.index(docs.START):text.index(docs.END)]
    rows = {}
    for line in section.splitlines()[3:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0]] = cells
    return rows


def test_the_readme_troubleshooting_table_matches_the_registry():
    text = README.read_text()
    assert docs.with_table(text) == text, "run: .venv/bin/python -m fleetcache.devtools.docs"


def test_the_table_has_one_row_per_reason():
    assert set(table_rows()) == set(reasons.REGISTRY)


def test_every_exit_code_row_is_in_the_readme_with_its_code_and_remedy():
    text = README.read_text()
    for row in exitcodes.EXIT_CODES:
        assert f"| {row.reason} | {row.code} |" in text
        assert row.remedy in text


@pytest.mark.parametrize("reason", sorted(reasons.REGISTRY.values()), ids=str)
def test_every_reason_says_where_it_shows_and_what_to_do(reason):
    assert reason.where.strip() and reason.remedy.strip()


def test_every_entry_is_named_as_the_reason_it_carries():
    entries = {name: value for name, value in vars(reasons).items() if isinstance(value, reasons.Reason)}
    assert all(name == value for name, value in entries.items())
    assert set(entries) == set(reasons.REGISTRY)


# --- the retry column says what the Job, Kubernetes and provider-kubernetes do

JOB_DEFAULTS = {path.rsplit(".", 1)[1]: node.get("default")
                for path, node in xrds.walk_schema(xrds.load_xrds()["ModelCache"].schema)
                if path.startswith("spec.job.")}
# Failures that end a hydration Job: the permanent exit codes but verify's (19, run by hand)
# and the node warmer's (22, a DaemonSet), and the two Kubernetes reports itself.
FAILED_JOBS = sorted({str(row.reason) for row in exitcodes.EXIT_CODES if row.permanent}
                     - {reasons.CacheCorrupted, reasons.NodeCacheNotDedicated}
                     | {reasons.DeadlineExceeded, reasons.BackoffLimitExceeded})


def retried_cell(reason: str) -> str:
    return table_rows()[reason][2]


@pytest.mark.parametrize("reason", FAILED_JOBS)
def test_a_failed_job_is_retried_after_its_ttl_deletes_it_and_provider_kubernetes_recreates_it(reason):
    cell = retried_cell(reason)
    assert cell.startswith("after the Job's TTL (spec.job.ttlSecondsAfterFinished")
    assert f"{JOB_DEFAULTS['ttlSecondsAfterFinished'] // 3600}h by default" in cell
    assert "provider-kubernetes creates it again" in cell


@pytest.mark.parametrize("row", [r for r in exitcodes.EXIT_CODES if not r.permanent], ids=lambda r: str(r.reason))
def test_a_transient_failure_is_retried_within_the_job_then_after_its_ttl(row):
    cell = retried_cell(row.reason)
    assert cell.startswith("yes, within the Job (spec.job.backoffLimit more pods, "
                           f"{JOB_DEFAULTS['backoffLimit']} by default)")
    assert f"after the Job's TTL ({JOB_DEFAULTS['ttlSecondsAfterFinished'] // 3600}h by default)" in cell


def test_corruption_found_by_verify_is_not_retried_since_only_a_hand_run_verify_reports_it():
    assert retried_cell(reasons.CacheCorrupted).startswith("no: only `fleetcache-agent verify`, run by hand")


def test_a_node_cache_that_is_not_dedicated_is_checked_again_by_its_warmer():
    assert reasons.NodeCacheNotDedicated in node_warm.RECHECKED
    assert retried_cell(reasons.NodeCacheNotDedicated).startswith("yes: the node's warmer")


def test_a_remedy_that_deletes_a_job_gives_the_command_on_the_target_cluster():
    deleting = [r for r in reasons.REGISTRY.values() if re.search(r"\bdelete\b[^.;]*\bJob\b", r.remedy)]
    assert deleting, "no remedy deletes a Job"
    for reason in deleting:
        assert reasons.DELETE_HYDRATION_JOB in reason.remedy, reason


def test_the_job_delete_command_selects_the_labels_the_hydration_jobs_carry():
    command = reasons.DELETE_HYDRATION_JOB.replace("<cache>", "qwen3-0-6b")
    assert command.startswith("kubectl --context <cluster> -n <namespace> delete job -l ")
    selector = dict(pair.split("=") for pair in command.rsplit(" ", 1)[1].split(","))
    assert selector.items() <= hydration_objects.labels_for("qwen3-0-6b", "gpu-east-1").items()


def test_a_reason_is_defined_once():
    with pytest.raises(ValueError, match="defined twice"):
        reasons.Reason("HydrationFailed", where="anywhere", remedy="anything")


def test_the_exit_codes_are_the_registry_entries_with_a_code():
    assert [row.reason for row in exitcodes.EXIT_CODES] == sorted(
        (r for r in reasons.REGISTRY.values() if r.exit_code is not None), key=lambda r: r.exit_code)


def test_a_reason_goes_into_json_and_protobuf_as_its_name():
    struct = struct_pb2.Struct()
    struct.update({"reason": reasons.HydrationFailed})
    assert struct["reason"] == "HydrationFailed"
    assert json.dumps({"reason": reasons.HydrationFailed}) == '{"reason": "HydrationFailed"}'


def test_a_copied_or_pickled_reason_is_the_registry_entry():
    assert copy.deepcopy(reasons.CapacityLow) is reasons.CapacityLow
    assert pickle.loads(pickle.dumps(reasons.CapacityLow)) is reasons.CapacityLow


def test_with_remedy_appends_the_entry_s_remedy_once():
    said = reasons.with_remedy("cluster a is full", reasons.CapacityLow)
    assert said == f"cluster a is full. {reasons.CapacityLow.remedy}"
    assert reasons.with_remedy(said, reasons.CapacityLow) == said


def reason_literals(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line name` of every string literal that is a registered reason where the code
    gives a reason: a `reason=` keyword, the reason of `.condition(type, status, reason)`,
    `with_remedy(message, reason)` and `AgentError(reason, what)`, a `"reason"` dict value,
    an assignment to `reason` or `.reason`, a comparison with one - and anywhere at all for
    a name that is not also a phase or a condition type."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def names_reason(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "reason") or \
            (isinstance(node, ast.Name) and node.id == "reason")

    def given_as_reason(node: ast.AST) -> bool:
        parent = parents.get(node)
        while isinstance(parent, (ast.IfExp, ast.BoolOp, ast.Tuple)):
            node, parent = parent, parents.get(parent)
        if isinstance(parent, ast.keyword):
            return parent.arg == "reason"
        if isinstance(parent, ast.Call):
            called = getattr(parent.func, "attr", getattr(parent.func, "id", ""))
            position = {"condition": 2, "with_remedy": 1, "AgentError": 0}.get(called)
            return position is not None and len(parent.args) > position and parent.args[position] is node
        if isinstance(parent, ast.Dict):
            return any(value is node and isinstance(key, ast.Constant) and key.value in ("reason", "deliveryReason")
                       for key, value in zip(parent.keys, parent.values, strict=True))
        if isinstance(parent, ast.Assign):
            return any(names_reason(target) for target in parent.targets)
        if isinstance(parent, ast.Compare):
            return any(names_reason(side) for side in (parent.left, *parent.comparators))
        return False

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in reasons.REGISTRY:
            parent = parents.get(node)
            if isinstance(parent, ast.Dict) and node in parent.keys or isinstance(parent, ast.Expr):
                continue  # a key, or a docstring
            if node.value not in ALSO_PHASES_OR_CONDITIONS or given_as_reason(node):
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.value}")
    return sorted(found)


PRODUCT_CODE = sorted(p for folder in ("functions", "agent") for p in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", PRODUCT_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_code_names_registry_entries_not_reason_strings(path):
    assert reason_literals(path) == [], "name the entry: reasons.<Name> (fleetcache/reasons.py)"


def test_the_literal_scan_finds_a_reason_given_as_a_string(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('outcome.condition("Degraded", True, "HydrationFailed", "m")\n'
                      'phase = "Hydrating"\nreason = "Hydrating"\nx = {"reason": "Evicted", "phase": "Evicted"}\n')
    assert reason_literals(sample, tmp_path) == ["sample.py:1 HydrationFailed", "sample.py:3 Hydrating",
                                                 "sample.py:4 Evicted"]


def test_the_readme_opens_with_the_two_setup_commands():
    block = README.read_text().split("```")[1]
    commands = [line.split("#")[0].strip() for line in block.splitlines()[1:] if line.strip()]
    assert commands == ["make demo", "make test"]
