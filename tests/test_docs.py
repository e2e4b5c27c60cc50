"""The README's troubleshooting table is generated from the code's tables and kept in step."""

from __future__ import annotations

from pathlib import Path

from fleetcache import docs, exitcodes
from fleetcache.functions import kit

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_troubleshooting_table_matches_the_exit_code_table_and_reasons():
    text = README.read_text()
    assert docs.with_table(text) == text, "run: .venv/bin/python -m fleetcache.docs"


def test_every_exit_code_reason_and_remedy_is_in_the_readme():
    text = README.read_text()
    for row in exitcodes.EXIT_CODES:
        assert f"| {row.reason} | {row.code} |" in text
        assert row.remedy in text


def test_every_composer_reason_says_where_to_look():
    for reason in set(kit.REASONS) - set(exitcodes.BY_REASON):
        assert reason in docs.WHERE, f"add {reason} to fleetcache.docs.WHERE"


def test_the_readme_opens_with_the_two_setup_commands():
    block = README.read_text().split("```")[1]
    commands = [line.split("#")[0].strip() for line in block.splitlines()[1:] if line.strip()]
    assert commands == ["make demo", "make test"]
