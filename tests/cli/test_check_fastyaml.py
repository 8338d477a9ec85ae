"""`cli.fastyaml` is held to PyYAML: the same data from the same text (and the same errors), and the
same bytes from the same data as `yaml.dump_all` with libyaml's dumper. The inputs are every YAML
and JSON file the project has (real-world manifests, captured AdmissionReviews, Kubernetes'
round-trip data, policies, deploy/), YAML written to hit the cases handed back to PyYAML (aliases,
merge keys, tags, unhashable keys), and generated data."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from support.corpus import generated_jobs
from support.paths import EXAMPLES, FIXTURES, POLICIES, ROOT

from trainadmit.cli import fastyaml
from trainadmit.engine import Request, decide

OPTIONS = {"sort_keys": False, "default_flow_style": False, "width": 120}
FILES = sorted(p for folder in (FIXTURES, EXAMPLES, POLICIES, ROOT / "deploy")
               for p in folder.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))


def pyyaml(text: str):
    """PyYAML's documents, or its error message."""
    try:
        return list(yaml.load_all(text, Loader=yaml.CSafeLoader))
    except yaml.YAMLError as exc:
        return f"error: {exc}"


def ours(text: str):
    try:
        return list(fastyaml.load_all(text))
    except yaml.YAMLError as exc:
        return f"error: {exc}"


def stock_dump(docs: list) -> str:
    return yaml.dump_all(docs, Dumper=yaml.CSafeDumper, **OPTIONS)


def our_dump(docs: list) -> str:
    out = io.StringIO()
    dumper = fastyaml.open_dumper(out, **OPTIONS)
    for doc in docs:
        dumper.represent(doc)
    dumper.close()
    dumper.dispose()
    return out.getvalue()


def test_the_corpus_is_the_projects_files():
    assert len(FILES) > 60 and any(p.name == "batch.v1.Job.json" for p in FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_project_file_loads_and_dumps_as_pyyaml_does(path):
    text = path.read_text()
    docs = pyyaml(text)
    assert ours(text) == docs
    assert not isinstance(docs, str)
    assert our_dump(docs) == stock_dump(docs)


@pytest.mark.parametrize("text", [
    "a: &x {b: 1}\nc: *x\n",  # an alias of a map: one shared object
    "- &l [1, 2]\n- *l\n",
    "base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n",  # merge key
    "s: !!set {a, b}\no: !!omap [{a: 1}, {b: 2}]\np: !!pairs [{a: 1}]\n",
    "b: !!binary aGVsbG8=\nt: 2001-12-14t21:59:43.10-05:00\nd: 2002-12-14\nf: !!float 1\ni: 0x1F\n",
    "? [a, b]\n: unhashable\n",  # PyYAML's error
    "x: !Ref something\n",  # an unknown tag: PyYAML's error
    "n: ~\ny: yes\nno: off\ne: ''\nq: '8'\nv: 1_000\ns: 1:30\nf: .inf\nnan: .nan\n",
    "--- 1\n--- text\n---\n--- [a]\n...\n",
    "k: &s scalar\nv: *s\n",
])
def test_the_cases_handed_to_pyyaml_give_pyyaml_results(text):
    assert ours(text) == pyyaml(text)


def test_a_recursive_structure_is_pyyamls():
    [[inner]] = ours("- &r [*r]\n")
    assert inner[0] is inner


def test_aliases_stay_one_object():
    [doc] = ours("a: &x {b: 1}\nc: *x\n")
    assert doc["a"] is doc["c"]
    out = our_dump([doc])
    assert out == stock_dump([doc]) and "&id001" in out


def test_stdin_like_streams_are_read_as_needed():
    text = "".join(f"---\nkind: Job\nmetadata: {{name: j{i}}}\n" for i in range(500))
    stream = io.StringIO(text)
    docs = fastyaml.load_all(stream)
    first = next(docs)
    assert first == {"kind": "Job", "metadata": {"name": "j0"}}
    assert stream.tell() < len(text)  # the rest is not read yet
    assert len(list(docs)) == 499


def test_mutated_jobs_dump_as_libyaml_does(policy):
    docs = [d for p in (FIXTURES / "real-world").glob("*.y*ml") for d in pyyaml(p.read_text()) if d]
    docs += generated_jobs(30)
    mutated = []
    for doc in docs:
        decision = decide(policy, Request(doc, namespace="team-nlp"))
        mutated.append(decision.mutated if decision.mutated is not None else doc)
        mutated.extend(decision.companions)
    assert sum(m not in docs for m in mutated) > 10
    assert our_dump(mutated) == stock_dump(mutated)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
    st.text(max_size=40),
    st.sampled_from(["yes", "no", "on", "8", "0x10", "1e3", "1:30", "~", "null", "-", "- a", ": x", "#c", "'q'",
                     '"d"', " lead", "trail ", "a\nb", "\t", "é", "\u2028", "x" * 130, "2002-12-14", "<<", "=",
                     ".inf", "!tag", "&a", "*a", "{a}", "[b]", "%", "@", "`"]),
)
keys = st.one_of(st.text(max_size=12), st.integers(), st.booleans(), st.none())
trees = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                      st.dictionaries(keys, inner, max_size=5)), max_leaves=40)


@settings(max_examples=80, deadline=None)
@given(st.lists(trees, min_size=1, max_size=3), st.booleans())
def test_generated_data_dumps_and_loads_as_pyyaml_does(docs, share):
    if share and isinstance(docs[0], (dict, list)):
        docs.append(docs[0])  # the same object twice: anchors and aliases
    dumped = our_dump(docs)
    assert dumped == stock_dump(docs)
    loaded = ours(dumped)
    assert loaded == pyyaml(dumped)
    assert json.dumps(loaded, default=str) == json.dumps(pyyaml(dumped), default=str)


def test_floats_and_other_types_go_through_pyyaml():
    docs = [{"f": 1e17, "g": -0.0, "h": math.inf, "s": {1, 2}, "b": b"\x00\x01", "t": (1, 2)}]
    assert our_dump(docs) == stock_dump(docs)
    docs[0]["o"] = object()
    with pytest.raises(yaml.representer.RepresenterError):
        stock_dump(docs)  # not safe YAML ...
    with pytest.raises(yaml.representer.RepresenterError):
        our_dump(docs)  # ... for either


def test_plain_documents_skip_the_representer_and_others_use_it(monkeypatch):
    def no_representer(self, data):
        raise AssertionError("SafeRepresenter used")

    monkeypatch.setattr(fastyaml.Dumper, "represent_data", no_representer)
    assert our_dump([{"a": [1, True, None, "x"]}, "text", 3])  # straight to libyaml
    for other in ({"f": 1.5}, {"k": {"shared": (shared := {"x": 1}), "again": shared}}, {(1, 2): "tuple key"}):
        with pytest.raises(AssertionError, match="SafeRepresenter used"):
            our_dump([other])


def test_anchors_are_pyyamls_around_plain_documents():
    shared = {"x": [1, 2]}
    docs = [{"a": shared, "b": shared}, {"plain": ["doc"]}, {"c": shared, "d": [shared, 1.5]}, "end"]
    out = our_dump(docs)
    assert out == stock_dump(docs) and out.count("&id001") == 2


def test_with_libyaml_the_loader_and_dumper_are_libyamls():
    assert yaml.__with_libyaml__ is True  # the test environment has libyaml; the fallback is run below
    assert fastyaml.Loader.__mro__[1] is yaml.CSafeLoader and fastyaml.Dumper.__mro__[1] is yaml.CSafeDumper
    assert isinstance(fastyaml.open_dumper(io.StringIO(), **OPTIONS), yaml.CSafeDumper)
    assert Path(fastyaml.__file__).name == "fastyaml.py"


# Run in a fresh interpreter where PyYAML reports no libyaml before fastyaml is imported: the loader and
# dumper are the pure-Python safe classes, and load_all and dumping (an alias, and a plain document whose
# many scalars the pure emitter keeps queued) give what PyYAML's pure-Python classes give.
_WITHOUT_LIBYAML = r"""
import io, json, sys
import yaml
yaml.__with_libyaml__ = False
from trainadmit.cli import fastyaml
options = json.loads(sys.argv[1])
text = "a: &x {k: [1, 2]}\nb: *x\n---\nplain: [doc, 1, true, null, '1', yes]\n"
ours = list(fastyaml.load_all(text))
pure = list(yaml.load_all(text, Loader=yaml.SafeLoader))
shared = {"x": [1, 2]}
docs = [{"a": shared, "b": shared}, {"plain": ["doc", 1, True, None, "1", "yes"], "n": {"m": "v"}}, "end"]
out = io.StringIO()
dumper = fastyaml.open_dumper(out, **options)
for doc in docs:
    dumper.represent(doc)
dumper.close()
dumper.dispose()
print(json.dumps({
    "loader": fastyaml.Loader.__mro__[1].__name__, "dumper": fastyaml.Dumper.__mro__[1].__name__,
    "opened": type(dumper).__mro__[1].__name__,
    "loaded": ours == pure, "alias_shared": ours[0]["a"] is ours[0]["b"], "ours_loaded": ours,
    "ours_dump": out.getvalue(), "pure_dump": yaml.dump_all(docs, Dumper=yaml.SafeDumper, **options),
}))
"""


def test_a_file_without_libyaml_falls_back_to_pure_python():
    r = subprocess.run([sys.executable, "-c", _WITHOUT_LIBYAML, json.dumps(OPTIONS)], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert (got["loader"], got["dumper"], got["opened"]) == ("SafeLoader", "SafeDumper", "SafeDumper")
    assert got["loaded"] and got["alias_shared"], got["ours_loaded"]
    assert got["ours_loaded"] == [{"a": {"k": [1, 2]}, "b": {"k": [1, 2]}},
                                  {"plain": ["doc", 1, True, None, "1", True]}]
    assert got["ours_dump"] == got["pure_dump"]
    assert got["ours_dump"].count("&id001") == 1 and got["ours_dump"].count("*id001") == 1


def typed(value):
    """``value`` with every scalar's type beside it (``==`` holds ``1 == True``)."""
    if isinstance(value, dict):
        return {typed(k): typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


EVENTS_THEN_NODES = [
    "a: 1\n---\nb: [true, null, 1.5, 2001-12-14, 0x1F, '1', \"no\", ~]\n---\nc: &x {d: 1}\ne: *x\n---\nf: g\n",
    "---\nplain: yes\n---\n!!str 1\n---\nh: i\n",
    "a: b\n---\nbase: &b {x: 1}\nmerged:\n  <<: *b\n  y: 2\n---\n\"<<\": quoted\n",
    "- 1\n---\n? [a, b]\n: c\n---\n- !custom x\n",
    "k: v\n---\n!!set {a, b}\n---\nlast: doc\n",
]


@pytest.mark.parametrize("text", EVENTS_THEN_NODES)
def test_documents_read_from_events_then_nodes_are_pyyamls_each_once(text):
    """A str is read from libyaml's events until a document needs nodes; from there it is read again through
    nodes, the documents already given skipped: each document once, in order, of PyYAML's types."""
    mine, theirs = ours(text), pyyaml(text)
    if isinstance(theirs, str):
        assert mine == theirs
        return
    assert typed(mine) == typed(theirs)
    assert len(mine) == len(theirs)


ERROR_AFTER_DOCUMENTS = ["a: 1\n---\nb: [1, 2\n---\nc: 3\n", "a: 1\n---\nb: *nowhere\n", "a: 1\n---\n- a\nb: c\n",
                         "a: 1\n---\nb: &x 1\nc: &x 2\nd: *x\n"]


@pytest.mark.parametrize("text", ERROR_AFTER_DOCUMENTS)
def test_the_documents_before_an_error_come_first_then_pyyamls_error(text):
    def partial(docs):
        got = []
        try:
            for doc in docs:
                got.append(doc)
        except yaml.YAMLError as exc:
            return got, str(exc)
        return got, None

    mine = partial(fastyaml.load_all(text))
    theirs = partial(yaml.load_all(text, Loader=yaml.CSafeLoader))
    assert mine == theirs
    assert mine[1] is not None or text.endswith("*x\n")


PARSER_EVENTS = ("ScalarEvent", "MappingStartEvent", "SequenceStartEvent", "MappingEndEvent", "SequenceEndEvent")


def parser_events_are_pyyamls() -> bool:
    return all(getattr(yaml._yaml, name) is getattr(yaml.events, name) for name in PARSER_EVENTS)


# Run in a fresh interpreter, which has one thread (a test process may hold others: a server's log readers):
# every project file read through the lighter events, as `trainadmit check` reads it, against PyYAML.
_ONE_THREAD = r"""
import json, sys, threading
import yaml
from trainadmit.cli import fastyaml
assert threading.active_count() == 1
with fastyaml._light_events() as light:
    pass
def typed(value):
    if isinstance(value, dict):
        return [[typed(k), typed(v)] for k, v in value.items()]
    if isinstance(value, list):
        return [typed(v) for v in value]
    return [type(value).__name__, repr(value)]
def read(load, text):  # the documents given before an error, and the error
    got = []
    try:
        for doc in load(text):
            got.append(typed(doc))
    except yaml.YAMLError as exc:
        return got, str(exc)
    return got, None
def same(text):
    return read(fastyaml.load_all, text) == read(lambda t: yaml.load_all(t, Loader=yaml.CSafeLoader), text)
texts = json.load(sys.stdin)
different = [path for path in sys.argv[1:] if not same(open(path, encoding="utf-8").read())]
different += [text for text in texts if not same(text)]
def restored():
    return all(getattr(yaml._yaml, n) is getattr(yaml.events, n) for n in
               ("ScalarEvent", "MappingStartEvent", "SequenceStartEvent", "MappingEndEvent", "SequenceEndEvent"))
# between documents, after a reader stops early and after an error: PyYAML's event API and C emitter as ever
docs = fastyaml.load_all("a: [1, x]\n---\nb: {c: d}\n---\nlast: 1\n")
first = next(docs)
between = {"restored": restored(), "dump": yaml.dump(first, Dumper=yaml.CSafeDumper),
           "events": [type(e).__name__ for e in yaml.parse("k: v\n", Loader=yaml.CSafeLoader)][2:5]}
docs.close()
between["restored_after_close"] = restored()
try:
    list(fastyaml.load_all("a: 1\n---\nb: [1, 2\n"))
except yaml.YAMLError:
    between["error"] = True
between["restored_after_error"] = restored()
print(json.dumps({"light": light, "different": different, "restored": restored(), "between": between}))
"""


def test_in_a_process_with_one_thread_every_project_file_reads_through_the_lighter_events_as_pyyaml_reads_it():
    """And between documents, after a reader that stops early and after a parse error, PyYAML's event API and its C
    emitter see PyYAML's classes (they test events against the same module names)."""
    texts = [*EVENTS_THEN_NODES, *ERROR_AFTER_DOCUMENTS]  # the hand-backs to nodes and the errors, too
    r = subprocess.run([sys.executable, "-c", _ONE_THREAD, *map(str, FILES)], input=json.dumps(texts),
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got == {"light": True, "different": [], "restored": True,
                   "between": {"restored": True, "dump": "a:\n- 1\n- x\n",  # the emitter's isinstance tests
                               "events": ["MappingStartEvent", "ScalarEvent", "ScalarEvent"],
                               "restored_after_close": True, "error": True, "restored_after_error": True}}


def test_with_another_thread_alive_the_documents_are_read_through_nodes_as_pyyaml_reads_them():
    """Another thread could be using PyYAML: the parser's classes stay PyYAML's and the text is read through nodes."""
    text = "\n---\n".join(path.read_text() for path in sorted(EXAMPLES.glob("*.yaml"))[:6])
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        with fastyaml._light_events() as light:
            assert not light and parser_events_are_pyyamls()
        threaded = list(fastyaml.load_all(text))
    finally:
        release.set()
        other.join()
    assert typed(threaded) == typed(list(yaml.load_all(text, Loader=yaml.CSafeLoader)))
