"""A setting's Source is one object per (kind, name, field, note), equal to the one a decision would build."""

from __future__ import annotations

from trainadmit.engine.decision import Source, shared_source


def test_one_object_per_setting_equal_to_a_built_one():
    first = shared_source("Pool", "h100-ib", ("spec", "tolerations", 0))
    assert first == Source("Pool", "h100-ib", ("spec", "tolerations", 0))
    assert shared_source("Pool", "h100-ib", ("spec", "tolerations", 0)) is first
    assert shared_source("Pool", "h100-ib", ("spec", "tolerations", 1)) != first
    assert shared_source("Pool", "a100", ("spec", "tolerations", 0)) != first
    assert shared_source("Platform", "h100-ib", ("spec", "tolerations", 0)) != first
    noted = shared_source("Pool", "h100-ib", ("spec", "tolerations", 0), "why")
    assert noted != first and str(noted) == "Pool h100-ib: spec.tolerations[0] (why)"
