"""Policy documents: models, loading, the immutable PolicySet and its compiled CEL rules.

Below the engine: nothing here knows about workloads or requests. Load a set with
``trainadmit.engine.load_policy`` (which hands the loader the engine's rule ids)."""

from .loader import PolicyError, PolicyProblem, load_policy_dir
from .policyset import PolicySet, SourceRef

__all__ = ["PolicyError", "PolicyProblem", "PolicySet", "SourceRef", "load_policy_dir"]
