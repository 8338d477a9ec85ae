"""Checks of the values a policy injects into every GPU container, at least as strict as a user's.

A user Job that sets ``NCCL_ALGO=RING`` is warned at admission; the same variable in a Pool reaches
every Job of the pool without a word unless it is checked here. So the NCCL variables of a Pool
(``spec.nccl.env``) and of a CheckpointClass (``spec.env``) get the grammar user values get
(``grammars.nccl``: an error there is an error here, a warning a warning), plus what only a policy
can be told: a name NCCL does not document (a typo NCCL would ignore silently), with the closest
documented name, and NCCL's debugging variables, which should not ride along in every Job.

The checks read the raw document, not the model, so that a Pool with another mistake still has its
NCCL values checked in the same run, and each variable is reported at its own line.
"""

from __future__ import annotations

from ..grammars.lazydataclass import dataclass
from ..grammars.nccl import DEBUGGING_VARS, KNOWN_VARS, VARIABLE_PREFIX, check_nccl_value, closest_known

# kind -> where that kind's injected environment variables are
INJECTED_ENV = {"Pool": ("spec", "nccl", "env"), "CheckpointClass": ("spec", "env")}


@dataclass(frozen=True)
class ValueProblem:
    loc: tuple
    severity: str  # "error" (the policy does not load) or "warning" (lint reports it)
    message: str
    fix: str


def _get(data: object, loc: tuple) -> object:
    for part in loc:
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def injected_value_problems(kind: str, data: dict) -> list[ValueProblem]:
    """Every problem of the NCCL variables a document of ``kind`` injects, in document order."""
    where = INJECTED_ENV.get(kind)
    env = _get(data, where) if where else None
    if not isinstance(env, dict):
        return []
    out: list[ValueProblem] = []
    for name, value in env.items():
        if not isinstance(name, str) or not name.startswith(VARIABLE_PREFIX):
            continue
        loc = (*where, name)
        if isinstance(value, str):
            problem = check_nccl_value(name, value)
            if problem is not None and problem.severity == "error":
                out.append(ValueProblem(loc, "error", f"{name}={value!r}: {problem.message}; a user Job with this "
                                        "value is denied", "correct the value: every GPU container gets it"))
            elif problem is not None:
                out.append(ValueProblem(loc, "warning", f"{name}={value!r}: {problem.message}; a user Job with "
                                        "this value is warned", "change the value unless this is what is meant"))
        if name in DEBUGGING_VARS:
            out.append(ValueProblem(loc, "warning", f"NCCL documents {name} as a debugging variable, not for "
                                    "production runs; a user Job setting it is warned",
                                    "remove it once the problem it works around is understood: every Job of the "
                                    "pool inherits it"))
        elif name not in KNOWN_VARS:
            close = closest_known(name)
            out.append(ValueProblem(loc, "warning", f"{name} is not a variable the NCCL documentation lists; NCCL "
                                    "ignores unknown names without a word",
                                    f"did you mean {close}?" if close else
                                    "check the spelling (a network plugin's own variable is fine)"))
    return out
