"""The README's troubleshooting table is generated from the code and lists every reason a
user can see: the exit codes', the kit's, and every reason each composer emits, each with
where to look and its remedy."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

from fleetcache import reasons
from fleetcache.devtools import docs
from fleetcache import exitcodes
from fleetcache.agent.errors import Interrupted
from fleetcache.functions.composers import model_cache, model_cache_hydration, model_deployment, model_replica

README = Path(__file__).resolve().parents[1] / "README.md"


def table_rows() -> dict[str, list[str]]:
    """reason -> its row's cells, from the README's generated section."""
    text = README.read_text()
    section = text[text.index(docs.START):text.index(docs.END)]
    rows = {}
    for line in section.splitlines()[3:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0]] = cells
    return rows


def test_the_readme_troubleshooting_table_matches_the_code():
    text = README.read_text()
    assert docs.with_table(text) == text, "run: .venv/bin/python -m fleetcache.docs"


def test_every_exit_code_reason_and_remedy_is_in_the_readme():
    text = README.read_text()
    for row in exitcodes.EXIT_CODES:
        assert f"| {row.reason} | {row.code} |" in text
        assert row.remedy in text


@pytest.mark.parametrize("module", docs.composer_modules(), ids=lambda m: m.__name__)
def test_every_reason_a_composer_emits_is_in_the_readme_with_a_remedy(module):
    rows = table_rows()
    for reason in docs.emitted_reasons(module) | set(getattr(module, "REASONS", {})):
        assert reason in rows, f"{reason} ({module.__name__}) is not in the README table"
        assert rows[reason][-1], f"{reason} has no remedy in the README table"
        assert rows[reason][3], f"{reason}: add where to look to fleetcache.docs.WHERE"


def test_every_declared_remedy_is_the_one_in_the_readme():
    rows = table_rows()
    for reason, remedy in docs.declared_remedies().items():
        assert rows[reason][-1] == remedy, reason


def test_the_agents_interrupted_reason_is_in_the_readme():
    assert table_rows()[Interrupted.REASON][-1] == docs.REMEDIES[Interrupted.REASON]


def test_the_reasons_the_issue_found_missing_are_listed():
    rows = table_rows()
    for reason in ("Starting", "Hydrating", "NotACacheTarget", "CacheReady", "RolloutQueued",
                   "DeploymentNotFound"):
        assert reason in rows, reason


@pytest.mark.parametrize("module, reason", [
    (model_replica, "Starting"), (model_replica, "EngineChanging"),
    (model_deployment, "NotACacheTarget"), (model_deployment, "SwitchToCacheNever"),
    (model_cache, "RolloutQueued"), (model_cache, "TooFewClustersReady"),
    (model_cache_hydration, "VolumeNotBound"), (model_cache_hydration, "Hydrated")])
def test_the_scan_finds_what_each_composer_reports(module, reason):
    assert reason in docs.emitted_reasons(module)


SAMPLE = '''
from dataclasses import dataclass
from fleetcache.functions import kit


@dataclass
class Phase:
    phase: str
    reason: str


def report(outcome, status, ready, row):
    outcome.condition("Progressing", True, "ByCondition", "message")
    kit.with_remedy("text", "ByRemedy")
    kit.Condition("Type", "True", reason="ByKeyword")
    reason = "ByAssignment" if ready == "NotAReason" else "ByOtherBranch"
    row.reason = status.get("reason") or "ByDefault"
    Phase("Pending", "ByDataclass")
    return {"reason": str(status.get("other") or "ByDict"), "phase": "NotAReasonEither"}
'''


def test_the_scan_reads_every_way_a_reason_is_given_and_nothing_else(tmp_path):
    path = tmp_path / "sample_composer.py"
    path.write_text(textwrap.dedent(SAMPLE))
    spec = importlib.util.spec_from_file_location("sample_composer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert docs.emitted_reasons(module) == {
        "ByCondition", "ByRemedy", "ByKeyword", "ByAssignment", "ByOtherBranch", "ByDefault",
        "ByDataclass", "ByDict"}


def test_a_reason_is_declared_once():
    seen = dict.fromkeys(reasons.REASONS, "kit")
    for module in docs.composer_modules():
        for reason in getattr(module, "REASONS", {}):
            assert reason not in seen, f"{reason}: {module.__name__} and {seen[reason]}"
            seen[reason] = module.__name__


def test_the_docs_own_remedies_are_only_for_reasons_the_code_gives_none():
    assert not set(docs.REMEDIES) & set(docs.declared_remedies())
    emitted = set().union(*(docs.emitted_reasons(m) for m in docs.composer_modules()))
    assert set(docs.REMEDIES) - {Interrupted.REASON} <= emitted


def test_every_where_to_look_is_for_a_reason_in_the_table():
    assert set(docs.WHERE) <= set(table_rows())


def test_the_readme_opens_with_the_two_setup_commands():
    block = README.read_text().split("```")[1]
    commands = [line.split("#")[0].strip() for line in block.splitlines()[1:] if line.strip()]
    assert commands == ["make demo", "make test"]
