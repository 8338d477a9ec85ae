"""The workloads area: each kind's adapter (operators' custom resources, Job and Pod), the roles of its
templates, the counts it reads, where its GPUs come from, and resizes. Fixtures several areas share
(``policy``, ``backend_policy``) are in tests/conftest.py."""
