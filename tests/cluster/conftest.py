"""The cluster area: the live cluster view, the reconcilers (PodGroups, preflight status), the reports
writer, report validity, and `trainadmit audit`, on captured responses and the fake apiserver. Fixtures several areas share
(``policy``, ``backend_policy``) are in tests/conftest.py."""
