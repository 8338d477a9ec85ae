"""The project's folders the tests read: all inside the repository, none in ``../shared``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # tests/support/paths.py -> the repository
FIXTURES = ROOT / "tests" / "fixtures"  # public manifests, each with its source in SOURCES.md there
POLICIES = ROOT / "policies"
EXAMPLES = ROOT / "examples"
