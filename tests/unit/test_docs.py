"""The documentation is part of the product: the generated configuration reference is up to
date, and user-facing text points nowhere outside the repository."""

from __future__ import annotations

import re
import subprocess

from debezium_bridge.cli.reference import configuration_reference
from tests.paths import ROOT


def test_configuration_reference_is_current() -> None:
    written = (ROOT / "docs" / "configuration.md").read_text()
    assert written == configuration_reference(), "docs/configuration.md is stale: run scripts/docs"


def test_nothing_user_facing_points_outside_the_repository() -> None:
    """README, docs and the package (docstrings, --help) never cite the project's private
    research notes or their codes (A2, MF-26, SP-ADD, CFG, SPEC §…)."""
    tracked = subprocess.run(["git", "ls-files", "README.md", "docs", "debezium_bridge"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    pattern = re.compile(r"\.\./shared|shared/reference|\bMF-2\d\b|\bSP-(ADD|CREATE)\b|\bCFG\b"
                         r"|SPEC §|\(A\d{1,2}\b|\bA\d{1,2}[:,)]")
    offenders = [f"{path}:{n}" for path in tracked if path.endswith((".py", ".md"))
                 for n, line in enumerate((ROOT / path).read_text().splitlines(), 1)
                 if pattern.search(line)]
    assert offenders == []
