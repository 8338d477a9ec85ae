"""Request bodies the server refuses as a 400 before the engine sees them (issue 11, row 8), in-process."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.manifests import review

from trainadmit.server.jsonbody import MAX_DEPTH, JSONRejected, parse_json


def nested(depth: int, opener: str = "[") -> bytes:
    closer = {"[": "]", "{": "}"}[opener]
    if opener == "[":
        return (opener * depth + closer * depth).encode()
    return ('{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)).encode()


@pytest.mark.parametrize("opener", ["[", "{"])
def test_depth_limit_is_exact_and_deep_input_never_raises_recursion_error(opener):
    assert parse_json(nested(MAX_DEPTH, opener)) is not None
    for depth in (MAX_DEPTH + 1, 1000, 100_000):
        with pytest.raises(JSONRejected, match="deeper than 64 levels"):
            parse_json(nested(depth, opener))


@pytest.mark.parametrize("body,where", [
    (b'{"metadata": {"name": "x\\ud800y"}}', "/metadata/name"),
    (b'{"a": ["ok", "\\udc00"]}', "/a/1"),
    (b'{"\\ud800": 1}', "(the key)"),
])
def test_lone_surrogates_are_refused_with_their_path(body, where):
    with pytest.raises(JSONRejected, match="lone UTF-16 surrogate") as exc:
        parse_json(body)
    assert where in exc.value.message


@pytest.mark.parametrize("body,reason", [
    (b'"\xed\xa0\x80"', "not valid UTF-8"),  # a surrogate encoded as UTF-8 bytes
    (b'"\xff"', "not valid UTF-8"),
    (b"[NaN]", "NaN is not a JSON value"),
    (b"[-Infinity]", "-Infinity is not a JSON value"),
    (b'{"a": ', "not JSON"),
    (b"1" * 5000, "not JSON"),  # over Python's int digit limit
])
def test_other_non_json_is_refused(body, reason):
    with pytest.raises(JSONRejected, match=reason):
        parse_json(body)


def test_what_json_allows_is_parsed_as_json_parses_it():
    for name in ("job-03-mutate-Job-CREATE.json", "job-09-mutate-Job-UPDATE.json", "pod-01-mutate-Pod-CREATE.json"):
        body = json.dumps(review(name)).encode()
        assert parse_json(body) == json.loads(body)
    assert parse_json(b'["\\ud83d\\ude00", "\\\\ud800"]') == ["\U0001f600", "\\ud800"]  # a pair; escaped text


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                    max_leaves=30))
def test_any_json_value_of_valid_unicode_round_trips(value):
    try:
        body = json.dumps(value).encode()
    except UnicodeEncodeError:
        return
    try:
        text = json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # hypothesis text may hold lone surrogates: those must be refused
        with pytest.raises(JSONRejected):
            parse_json(body)
        return
    assert parse_json(body) == value == parse_json(text)
