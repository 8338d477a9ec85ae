"""The package's layers (tests/project/test_layout.py holds every module to importing its own layer and below;
the policy cache's key covers the layers the loader reads, tests/policy/test_check_policy_cache.py)."""

from __future__ import annotations

# lower number = lower layer; a module may import its own layer's package and anything below
LAYERS: dict[str, int] = {"grammars": 0, "policy": 1, "engine": 2, "authoring": 3, "cluster": 3, "preflight": 3,
                          "certs": 4, "server": 5, "cli": 6}
