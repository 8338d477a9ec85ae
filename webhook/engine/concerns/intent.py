"""The intent concern: the rules of resolving a user's intent keys, and what resolution reads.

The resolution itself (``engine.intent``) runs before the plan and every concern, since the plan and the
context read its result; this concern only declares its rules and reads for the registry.
"""

from __future__ import annotations

from ..concern import Concern
from ..intent import INTENT_RULES
from ..reads import INTENT_KEYS, Reads

# the intent keys (and what matching reads: who owns the object), the fabrics asked for (annotation keys,
# resources), the GPU resources of every container and the DRA claims of every pod spec
CONCERN = Concern("intent", rules=INTENT_RULES,
                  reads=Reads(metadata=("labels", "annotations", "ownerReferences"), annotations=(INTENT_KEYS,),
                              pod=("hostNetwork", "resourceClaims"), container=("resources",),
                              init_container=("resources",)))
