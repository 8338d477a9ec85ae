"""Which files of a directory are the policy and which are its test suites: the loader reads the first,
the policy cache keys on them, ``policy test`` and ``policy lint`` read the second.

Apart from the loader because the policy cache (``cache``) lists them without loading pydantic; both
rules are here so that a file is never read as both."""

from __future__ import annotations

from pathlib import Path

POLICY_SUFFIXES = (".yaml", ".yml", ".json")
SUITE_SUFFIXES = (".test.yaml", ".test.yml")
TESTS_DIR = "tests"  # suites and the fixture data their cases reference


def _hidden(rel: Path) -> bool:
    """Hidden files and the ``..data`` symlink folders of a mounted ConfigMap are skipped."""
    return any(part.startswith(".") for part in rel.parts)


def _under_tests(rel: Path) -> bool:
    return TESTS_DIR in rel.parts[:-1]


def is_suite_path(rel: Path) -> bool:
    """Whether ``rel`` (relative to the policy directory) is read as a test suite: ``*.test.yaml`` anywhere
    and any YAML under a ``tests/`` folder (YAML there that is not a PolicyTest is fixture data)."""
    return (rel.suffix in (".yaml", ".yml") and not _hidden(rel)
            and (rel.name.endswith(SUITE_SUFFIXES) or _under_tests(rel)))


def policy_files(directory: Path) -> list[Path]:
    """Policy files of a directory in a stable order."""
    return sorted(p for p in directory.rglob("*")
                  if p.suffix in POLICY_SUFFIXES and p.is_file() and _is_policy_path(p.relative_to(directory)))


def _is_policy_path(rel: Path) -> bool:
    """Not hidden, not a test suite, and nothing under a ``tests/`` folder (fixture data in any format)."""
    return not _hidden(rel) and not is_suite_path(rel) and not _under_tests(rel)
