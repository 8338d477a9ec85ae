"""The policy area: loading, linting, `policy init`, `policy test` suites, CEL authoring, and the validated
policy cache. Fixtures several areas share
(``policy``, ``backend_policy``) are in tests/conftest.py."""
