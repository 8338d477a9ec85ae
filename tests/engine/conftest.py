"""The engine area: decisions in-process (rules, concerns and their order, the plan, what concerns read, the
mutation and its patch, final-state checks), on public manifests and generated workloads. Fixtures several areas share
(``policy``, ``backend_policy``) are in tests/conftest.py."""
