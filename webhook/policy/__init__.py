"""Policy documents: models, loading, and the immutable PolicySet the engine reads."""

from .loader import PolicyError, PolicyProblem, load_policy_dir
from .policyset import RULE_DEFAULTS, PolicySet, SourceRef

__all__ = ["RULE_DEFAULTS", "PolicyError", "PolicyProblem", "PolicySet", "SourceRef", "load_policy_dir"]
