"""The repository as a whole: the package's layers and the tests' layout, the installed wheel, deploy/'s
manifests, and the benchmark scripts. Fixtures several areas share
(``policy``, ``backend_policy``) are in tests/conftest.py."""
