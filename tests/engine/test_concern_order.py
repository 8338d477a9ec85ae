"""Concerns share nothing but the plan: in any order the registry allows, they give the same decision.

The registry runs mutations in its listed order, and a concern may only declare that it runs after
others (``Concern.after``: the preflight describes the container the others configured). Any other order
that keeps those declarations must give the same patch (applied: the same object), the same violations,
the same provenance annotation and the same companions, over every public manifest of ``tests/fixtures``
and ``examples/``, every gang backend, at /mutate and at /validate. Swapping two concerns used to change
the answer without any other test noticing (gang after topology dropped "topology" from
``trainadmit.io/applied``).
"""

from __future__ import annotations

import copy
import importlib
import json
import random

import pytest
from support.builders import with_gpus
from support.manifests import load_yaml, review
from support.paths import FIXTURES, ROOT
from support.policies import BACKENDS, write_policy

from trainadmit.engine import Request, decide, load_policy
from trainadmit.engine.registry import MUTATIONS, VALIDATIONS
from trainadmit.engine.workloads import adapter_for

decide_module = importlib.import_module("trainadmit.engine.decide")  # the module, not its function


def allowed_orders(count: int, seed: int) -> list[tuple]:
    """The registry's order reversed as far as ``after`` allows, gang and topology swapped, and ``count``
    random orders that keep every ``after``."""
    rng = random.Random(seed)

    def topological(pick) -> tuple:
        left, done, out = list(MUTATIONS), set(), []
        while left:
            ready = [c for c in left if all(a in done for a in c.after)]
            chosen = pick(ready)
            out.append(chosen)
            done.add(chosen.name)
            left.remove(chosen)
        return tuple(out)

    orders = [topological(lambda ready: ready[-1])]
    names = [c.name for c in MUTATIONS]
    swapped = list(MUTATIONS)
    g, t = names.index("gang"), names.index("topology")
    swapped[g], swapped[t] = swapped[t], swapped[g]
    orders.append(tuple(swapped))
    orders += [topological(rng.choice) for _ in range(count)]
    return orders


def workloads() -> list[tuple[str, dict]]:
    """Every object of a handled kind in the public fixtures and the examples, and each as a GPU workload."""
    found = []
    paths = sorted([*FIXTURES.glob("operators/*/examples/*.yaml"), *FIXTURES.glob("real-world/**/*.yaml"),
                    *(ROOT / "examples").glob("*.yaml")])
    for path in paths:
        for i, doc in enumerate(load_yaml(path)):
            if not isinstance(doc, dict) or adapter_for(doc.get("apiVersion"), doc.get("kind")) is None:
                continue
            found.append((f"{path.name}#{i}", doc))
            if doc.get("kind") != "Pod":
                found.append((f"{path.name}#{i}+gpus", with_gpus(doc)))
    for name in ("job-03-mutate-Job-CREATE.json", "pod-01-mutate-Pod-CREATE.json"):
        found.append((name, review(name)["request"]["object"]))
    return found


def outcome(decision) -> dict:
    """What a decision says, independent of the order its parts were produced in."""
    applied = None
    if decision.mutated is not None:
        applied = (decision.mutated.get("metadata") or {}).get("annotations", {}).get("trainadmit.io/applied")
    return {
        "matched": decision.matched, "reason": decision.reason,
        "violations": sorted((v.rule, v.action.value, v.path, v.message, v.hint) for v in decision.violations),
        "mutated": json.dumps(decision.mutated, sort_keys=True),
        "applied": applied, "companions": sorted(json.dumps(c, sort_keys=True) for c in decision.companions),
        "injections": sorted((i.path, i.concern, str(i.source)) for i in decision.injections),
        "summary": decision.summary, "unverified": sorted(decision.unverified),
    }


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    out = {name: load_policy(write_policy(tmp_path_factory.mktemp(name), settings))
           for name, settings in BACKENDS.items()}
    out["bundled"] = load_policy(ROOT / "policies")
    return out


@pytest.mark.parametrize("backend", [*sorted(BACKENDS), "bundled"])
def test_every_allowed_order_gives_the_same_decision(policies, backend, monkeypatch):
    policy = policies[backend]
    objects = workloads()
    assert len(objects) > 100
    orders = allowed_orders(1, seed=len(backend))
    compared = 0
    for label, obj in objects:
        for phase in ("mutate", "validate"):
            monkeypatch.setattr(decide_module, "MUTATIONS", MUTATIONS)
            monkeypatch.setattr(decide_module, "VALIDATIONS", VALIDATIONS)
            expected = decide(policy, Request(copy.deepcopy(obj), phase=phase))
            if not expected.matched:
                continue
            want = outcome(expected)
            for i, order in enumerate(orders):
                validations = list(VALIDATIONS)
                random.Random(i).shuffle(validations)  # rules only read: any order at all
                monkeypatch.setattr(decide_module, "MUTATIONS", order)
                monkeypatch.setattr(decide_module, "VALIDATIONS", tuple(validations))
                got = outcome(decide(policy, Request(copy.deepcopy(obj), phase=phase)))
                assert got == want, (label, phase, [c.name for c in order],
                                     {k: (want[k], got[k]) for k in want if want[k] != got[k]})
                compared += 1
    assert compared > 200


def test_the_registry_refuses_an_order_that_breaks_after():
    """The registry's own order keeps every ``after`` (checked when it is built); so do the orders above."""
    from trainadmit.engine import registry

    seen: set[str] = set()
    for concern in registry.MUTATIONS:
        assert set(concern.after) <= seen | {c.name for c in registry.CONCERNS if c.mutate is None}, concern.name
        seen.add(concern.name)
    with pytest.raises(RuntimeError, match="runs after"):
        registry._check(tuple(c if c.name != "storage" else type(c)(**{**c.__dict__, "after": ("no-such",)})
                              for c in registry.CONCERNS))
