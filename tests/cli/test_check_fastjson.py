"""`cli.fastjson.dumps` is ``json.dumps(value, indent=2, ensure_ascii=False)``: the same text for
every decision record of the examples and generated Jobs, and for generated data (floats, unicode,
control characters, non-str keys, subclasses of str and int), and the same errors."""

from __future__ import annotations

import enum
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.corpus import generated_jobs
from support.manifests import load_yaml
from support.paths import EXAMPLES

from trainadmit.cli import fastjson
from trainadmit.cli.inputs import Item
from trainadmit.cli.render import patch_element, record
from trainadmit.engine import Request, decide


def stdlib(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def test_decision_records_encode_as_the_standard_library_does(policy):
    objects = [doc for path in sorted(EXAMPLES.glob("*.yaml")) for doc in load_yaml(path)] + generated_jobs(40)
    for i, obj in enumerate(objects):
        item, decision = Item("corpus", i, obj), decide(policy, Request(obj, namespace="team-nlp"))
        for value in (record(item, decision), patch_element(item, decision)):
            assert fastjson.dumps(value) == stdlib(value)


class Color(enum.StrEnum):
    red = "red"


class Level(enum.IntEnum):
    high = 3


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(),
                    st.sampled_from([Color.red, Level.high, "\u2028", "\x00\x1f", "é\"\\/", math.inf, -math.inf]))
keys = st.one_of(st.text(max_size=8), st.sampled_from([1, 2.5, True, None, Color.red]))
trees = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(keys, inner, max_size=4)), max_leaves=30)


@settings(max_examples=200, deadline=None)
@given(trees)
def test_generated_values_encode_as_the_standard_library_does(value):
    assert fastjson.dumps(value) == stdlib(value)


def test_errors_are_the_standard_librarys():
    loop: list = []
    loop.append(loop)
    for bad in ({"x": {1, 2}}, {(1, 2): "tuple key"}, loop):
        with pytest.raises((TypeError, ValueError)) as theirs:
            stdlib(bad)
        with pytest.raises(type(theirs.value), match=str(theirs.value)[:20]):
            fastjson.dumps(bad)
