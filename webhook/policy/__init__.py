"""Policy documents: models, loading, the immutable PolicySet and its compiled CEL rules.

Below the engine: nothing here knows about workloads or requests. Load a set with
``trainadmit.engine.load_policy`` (which hands the loader the engine's rule ids). The loader (and
with it pydantic) is imported when ``load_policy_dir`` is first used: a set from the policy cache
(``cache``) needs neither."""

from .policyset import PolicySet, SourceRef
from .problems import PolicyError, PolicyProblem


def __getattr__(name: str):
    if name == "load_policy_dir":
        from .loader import load_policy_dir

        return load_policy_dir
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PolicyError", "PolicyProblem", "PolicySet", "SourceRef", "load_policy_dir"]
