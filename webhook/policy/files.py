"""Which files of a directory are the policy: the loader reads them and the policy cache keys on them.

Apart from the loader because the policy cache (``cache``) lists them without loading pydantic."""

from __future__ import annotations

from pathlib import Path

POLICY_SUFFIXES = (".yaml", ".yml", ".json")


def policy_files(directory: Path) -> list[Path]:
    """Policy files of a directory in a stable order (hidden files and ..data symlink dirs skipped; test
    suites and their fixture data, ``*.test.yaml`` and anything under a ``tests/`` folder, are not policy)."""
    return sorted(
        p for p in directory.rglob("*")
        if p.suffix in POLICY_SUFFIXES and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(directory).parts)
        and "tests" not in p.relative_to(directory).parts[:-1] and not p.name.endswith((".test.yaml", ".test.yml"))
    )


