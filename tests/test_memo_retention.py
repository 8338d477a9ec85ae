"""The decision memo (engine.memo) keeps what it needs for each remembered decision, not the object it was
keyed by: keys are as large as the object's projection, and distinct large objects kept theirs until the
table started over at 4,096 entries (issue 11, row 3: memory that follows request size)."""

from __future__ import annotations

import gc
import tracemalloc

from conftest import deep, review

from trainadmit.engine import Request
from trainadmit.engine.memo import Memo


def test_remembered_decisions_do_not_keep_their_objects(policy):
    memo = Memo(policy)
    template = review("job-03-mutate-Job-CREATE.json")["request"]["object"]
    count, size = 20, 100_000
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(count):
            obj = deep(template)
            obj["metadata"].setdefault("annotations", {})["example.com/notes"] = f"{i:06d}" + "x" * size
            decision = memo.decide(Request(obj, operation="CREATE", namespace="team-nlp", phase="mutate"))
            assert decision.allowed
        del obj, decision
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert memo.misses == count  # each object a different key: each remembered
    assert kept < count * size / 10, f"{kept:,} bytes kept for {count} decisions of {size:,}-byte objects"
