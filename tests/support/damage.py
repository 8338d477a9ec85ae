"""A hypothesis strategy that damages a valid document: it deletes keys and puts values of any
type at random places. Shared by the in-process engine fuzz and the fuzz of the running server."""

from __future__ import annotations

import copy

from hypothesis import strategies as st

junk = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**63) | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)


def all_paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from all_paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from all_paths(v, (*prefix, i))


@st.composite
def damaged(draw, seeds: list, min_depth: int = 1, max_edits: int = 5):
    doc = copy.deepcopy(draw(st.sampled_from(seeds)))
    paths = [p for p in all_paths(doc) if len(p) >= min_depth]
    for _ in range(draw(st.integers(min_value=1, max_value=max_edits))):
        path = draw(st.sampled_from(paths))
        parent = doc
        try:
            for part in path[:-1]:
                parent = parent[part]
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(junk)
        except (KeyError, IndexError, TypeError):
            continue
    return doc
