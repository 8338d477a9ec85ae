"""The command-line area: `trainadmit check` as CI runs it (exit codes, streams, reports, fast JSON/YAML, its
imports, --explain), every command over bad input, and `trainadmit preflight`. Fixtures several areas share
(``policy``, ``backend_policy``) are in tests/conftest.py."""
