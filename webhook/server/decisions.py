"""The server's decisions, remembered per policy generation: the engine's answer, at a lookup's cost.

A decision costs far more than parsing the request (intent, plan, a dozen concerns, the patch), yet
training jobs come in a few shapes: the same pool, intent, container layout and settings, with a different
name, image, command or run id. The engine decides in two stages (``engine.decide``): the concerns that
declare what they read decide on the object cut down to that (``engine.decide.project``), which makes that
stage a function of the projection; the rules on the whole object (custom CEL) then run on the object as it
will be stored. ``DecisionCache`` remembers the first stage keyed by the projection itself, so what the key
leaves out is exactly what no concern declares reading: a new rule that reads a field declares it next to
its rule (``Concern.reads``), which puts the field in the key, and nobody edits a list here. The second
stage runs on every request, remembered only under the values of the paths its expressions name.

The key gives the object's name a sentinel wherever it occurs as a whole token (``metadata.name``, and
what trainadmit or the apiserver derived from it: PodGroup names, pod-affinity selectors, the preflight's
gang id, a Job's job-name labels at ``/validate``), so jobs of one shape share an entry whatever they are
called, and likewise its uid. That is only sound if the decision treats the name as an opaque token, so a
miss computes the decision for the real object too and remembers the entry only when the two agree (the
sentinel given the real name back); a name that equals a word the decision could compare it with (a
policy's names and values, a string the engine's or the grammars' code holds, collected from their code
objects) is never remembered. What a decision asked the cluster view (pool and domain sizes, quota) is
recorded with the answers, and a hit counts only when every answer is unchanged. Objects the key cannot
hold safely (no usable name, a malformed value, anything but CREATE) are decided from scratch. A ``generateName``
object's key holds no name: the name the server drew for it (``Request.generated_name``, which the decision
gives it when it needs one: ``engine.naming``) takes the sentinel's place, so two such jobs of one shape share
an entry and each gets its own name.

``tests/server/test_decision_cache.py`` checks over generated objects, policies and cluster states that a
remembered decision equals ``decide``'s, and that a built-in rule reading a field no other rule reads is
served exactly as ``decide`` answers.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import types
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from ..engine import Decision, Request, Violation, decide
from ..engine.clusterview import ClusterView, NoCluster
from ..engine.concerns import custom
from ..engine.decide import decide_declared, exempt_user, made_by_controller, project, whole_object_violations
from ..engine.patch import replay
from ..engine.paths import get_path
from ..engine.provenance import undecided_owner
from ..engine.registry import WHOLE_OBJECT_VALIDATIONS
from ..engine.workloads import workload_of
from ..grammars.cel import object_reads
from ..policy import PolicySet
from ..policy.vocab import Action

SENTINEL = "trainadmit0memo0name0x"  # a valid object name no real request carries
UID_SENTINEL = "00000000-7a3e-4d0e-9e40-0000trainadm"  # likewise for metadata.uid
MAX_NAME = 50  # longer names change derived label values (hashed to 63 characters): not remembered
MIN_NAME = 3
_SPLIT = re.compile(r"[-./=,:@_]")


class _Recorder:
    """A cluster view that remembers the questions asked and the answers given."""

    def __init__(self, view: ClusterView):
        self._view = view
        self.calls: list[tuple[str, tuple, Any]] = []

    def __getattr__(self, name: str):
        attr = getattr(self._view, name)
        if not callable(attr):
            return attr

        def call(*args):
            answer = attr(*args)
            self.calls.append((name, args, answer))
            return answer
        return call


@dataclass(frozen=True)
class _Entry:
    """The engine's first stage on a projection, with the name as the sentinel."""

    matched: bool
    reason: str
    violations: tuple[tuple, ...]  # (rule, action, path, message, hint, fix)
    patch_parts: tuple[str, ...]  # the patch's text split at the name's sentinel: joined with the name on a hit
    whole_object_rules: bool
    cluster_calls: tuple[tuple[str, tuple, Any], ...]
    constant_view: type | None  # the class of a view whose answers never change, when computed with one

    def still_holds(self, cluster: ClusterView) -> bool:
        if self.constant_view is not None and type(cluster) is self.constant_view:
            return True
        return all(getattr(cluster, name)(*args) == answer for name, args, answer in self.cluster_calls)


class DecisionCache:
    """Remembered decisions of one policy generation. Safe to share between threads without a lock
    (a dict's get and set are atomic); bounded: a full table starts over, which costs one miss per shape."""

    def __init__(self, policy: PolicySet, size: int = 4096):
        self.policy = policy
        self.size = size
        self._entries: dict[bytes, _Entry] = {}
        self._whole: dict[tuple[bytes, bytes], tuple[Violation, ...]] = {}
        # the whole-object rules' results can be remembered under the paths they read only when they are the
        # custom CEL rules, whose expressions say which paths those are
        cel_only = WHOLE_OBJECT_VALIDATIONS == (custom.CONCERN,)
        self._reads = (object_reads([p.source for rule in policy.compiled_rules for p in rule.programs])
                       if cel_only else None)
        self._no_whole_rules = cel_only and not policy.compiled_rules  # the CEL rules are the policy's: none
        self._risky = _policy_words(policy) | code_words()
        self.hits = self.misses = self.bypassed = 0

    def decide(self, request: Request, cluster: ClusterView | None = None) -> Decision:
        """Equal to ``decide(policy, request, cluster)`` for what a webhook answers (allowed, every
        violation, the patch): ``Decision.patch_json`` is set, ``mutated`` and ``injections`` are not."""
        policy, cluster = self.policy, cluster or NoCluster()
        obj, namespace = request.obj, request.effective_namespace
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if request.operation != "CREATE" or not isinstance(meta, dict) or not _nameable(name) \
                or undecided_owner(obj) is not None:  # whether its provenance is forged depends on who asks
            return self._bypass(request, cluster)
        text = _key_text(project(policy, obj))
        if text is None or SENTINEL in text or (name is not None and name in self._risky):
            return self._bypass(request, cluster)
        # a generateName object has no name in the key; the one drawn for it (engine.naming) is the sentinel's
        generated = request.generated_name if name is None else ""
        if generated and (not _nameable(generated) or generated in self._risky or generated in text):
            return self._bypass(request, cluster)
        if name is not None:  # usually the name occurs once, as the whole metadata.name value
            text = text.replace(name, SENTINEL) if text.count(name) == 1 else _tokens_replaced(text, name, SENTINEL)
        uid = meta.get("uid")  # left out of the projection; what the apiserver derived from it is not (a
        if not (isinstance(uid, str) and len(uid) >= 8 and uid in text):  # Job's controller-uid labels at /validate)
            uid = None
        elif UID_SENTINEL in text:
            return self._bypass(request, cluster)
        else:
            text = text.replace(uid, UID_SENTINEL)
        # an exempt user's decision names the user, and whether a child was made by its controller depends
        # on who asks: both reasons are part of the key
        workload = workload_of(obj)
        made_by = made_by_controller(policy, workload, request.user) if workload is not None else ""
        key = _digest(f"{request.phase}|{namespace}|{exempt_user(policy, request.user)}|{made_by}|{bool(generated)}|"
                      f"{text}")
        entry = self._entries.get(key)
        if entry is None or not entry.still_holds(cluster):
            self.misses += 1
            entry, fresh = self._compute(request, text, name or generated or None, uid, cluster)
            if entry is None:  # the name is not opaque to this decision: answer from scratch, remember nothing
                self.bypassed += 1
                return self._complete(fresh, request, key=None)
            self._remember(self._entries, key, entry)
        else:
            self.hits += 1
        return self._complete(self._instantiate(entry, request, name or generated or None, uid), request, key)

    def _bypass(self, request: Request, cluster: ClusterView) -> Decision:
        self.bypassed += 1
        return decide(self.policy, request, cluster)

    def _remember(self, table: dict, key: Any, value: Any) -> None:
        if len(table) >= self.size:
            table.clear()
        table[key] = value

    def _compute(self, request: Request, text: str, name: str | None, uid: str | None,
                 cluster: ClusterView) -> tuple[_Entry | None, Decision]:
        """The entry for a projection (``text``, the name and uid as sentinels), and the engine's first stage
        for the real object; no entry when giving the sentinels the real values back does not give that."""
        recorder = _Recorder(cluster)
        as_keyed = Request(json.loads(text), request.operation, request.old, request.namespace, request.user,
                           request.dry_run, request.phase, SENTINEL if request.generated_name else "")
        d = decide_declared(self.policy, as_keyed, recorder)  # type: ignore[arg-type]
        violations = tuple((v.rule, v.action.value, v.path, v.message, v.hint, v.fix) for v in d.violations)
        constant = type(cluster) if getattr(cluster, "constant", False) else None
        patch_json = json.dumps(d.patch, separators=(",", ":"))
        entry = _Entry(d.matched, d.reason, violations, tuple(patch_json.split(SENTINEL)), d.whole_object_rules,
                       tuple(recorder.calls), constant)
        fresh = decide_declared(self.policy, request, cluster)
        mine = self._instantiate(entry, request, name, uid)
        agree = (mine.matched == fresh.matched and mine.whole_object_rules == fresh.whole_object_rules
                 and _texts(mine.violations) == _texts(fresh.violations)
                 and (not fresh.matched or json.loads(mine.patch_json or "[]")
                      == (fresh.patch if request.phase != "validate" else [])))
        return (entry if agree else None), fresh

    def _instantiate(self, entry: _Entry, request: Request, name: str | None, uid: str | None) -> Decision:
        def sub(text: str) -> str:
            if name is not None:
                text = text.replace(SENTINEL, name)
            return text.replace(UID_SENTINEL, uid) if uid is not None else text
        violations = [Violation(r, Action(a), sub(p), sub(m), sub(h), f) for r, a, p, m, h, f in entry.violations]
        decision = Decision(matched=entry.matched, reason=sub(entry.reason), violations=violations,
                            generation=self.policy.generation, whole_object_rules=entry.whole_object_rules)
        patch_json = None
        if request.phase != "validate":  # str.join, not a search of the whole text: most of a hit's cost otherwise
            patch_json = (name or SENTINEL).join(entry.patch_parts)
            if uid is not None and UID_SENTINEL in patch_json:
                patch_json = patch_json.replace(UID_SENTINEL, uid)
        decision.patch_json = patch_json if patch_json != "[]" else None  # no patch: like a fresh decision's []
        return decision

    def _complete(self, decision: Decision, request: Request, key: bytes | None) -> Decision:
        """The engine's second stage: the rules on the whole object, as it will be stored."""
        if not decision.whole_object_rules or not WHOLE_OBJECT_VALIDATIONS or self._no_whole_rules:
            return decision
        whole_key = self._whole_key(key, request) if key is not None else None
        found = self._whole.get(whole_key) if whole_key is not None else None
        if found is None:
            patch = json.loads(decision.patch_json) if decision.patch_json is not None else decision.patch
            stored = replay(request.obj, patch) if request.phase != "validate" and patch else request.obj
            found = tuple(whole_object_violations(self.policy, request, stored))
            if whole_key is not None:
                self._remember(self._whole, whole_key, found)
        decision.violations.extend(found)
        return decision

    def _whole_key(self, key: bytes, request: Request) -> tuple[bytes, bytes] | None:
        """CEL rules see the object as it will be stored: the real object, mutated on /mutate. Their result
        depends on the first stage's key (which fixes the patch) and on the real values of the paths their
        expressions name (``reads``), so it is remembered under both; None when the paths are not known."""
        reads = self._reads
        if reads is None:
            return None
        parts: list[Any] = [get_path(request.obj, path, None) for path in reads[0]]
        if reads[1]:
            fields = {"operation": request.operation, "namespace": request.effective_namespace,
                      "userInfo": request.user, "dryRun": request.dry_run,
                      "name": (request.obj.get("metadata") or {}).get("name")}
            # request.kind is the object's kind, already in the first stage's key
            parts.append([fields if f == "*" else fields.get(f) for f in reads[1] if f != "kind"])
        return key, _digest(json.dumps(parts, separators=(",", ":"), default=str))


def _key_text(projected: dict) -> str | None:
    """The projection as text (orjson: ~1/8 of json.dumps' time). None when text cannot tell values apart:
    orjson writes NaN and ±inf as null (then the slower writer's text, which spells them, is the key), and
    refuses what JSON cannot hold (an int beyond 64 bits)."""
    try:
        text = orjson.dumps(projected).decode()
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return None
    if "null" in text:
        try:
            text = json.dumps(projected, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError):
            return None
    return text


def _digest(key: str) -> bytes:
    """Tables hold a digest of each key, not the key: a key is as large as the object's projection, and 4,096
    of them from distinct large objects would stay in memory until the table starts over."""
    return hashlib.sha256(key.encode()).digest()


def _nameable(name: Any) -> bool:
    return name is None or (isinstance(name, str) and MIN_NAME <= len(name) <= MAX_NAME and SENTINEL not in name)


@lru_cache(maxsize=4096)
def _token(name: str) -> re.Pattern:
    """The name as a whole token: not inside a longer run of letters and digits."""
    return re.compile(rf"(?<![a-z0-9]){re.escape(name)}(?![a-z0-9])")


_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


def _tokens_replaced(text: str, name: str, by: str) -> str:
    """``_token(name).sub(by, text)``, by str.find: a regex that starts with a lookbehind tries every
    position of the text (~100 µs on a mutated Job), while the name occurs a handful of times."""
    out, start, size = [], 0, len(name)
    at = text.find(name)
    while at != -1:
        end = at + size
        if (at == 0 or text[at - 1] not in _TOKEN_CHARS) and (end == len(text) or text[end] not in _TOKEN_CHARS):
            out.append(text[start:at])
            out.append(by)
            start = end
            at = text.find(name, end)
        else:
            at = text.find(name, at + 1)
    out.append(text[start:])
    return "".join(out)


def _texts(violations: list[Violation]) -> list[tuple]:
    return [(v.rule, v.action, v.path, v.message, v.hint, v.fix) for v in violations]


def _words(value: str) -> set[str]:
    return {value, *(w for w in _SPLIT.split(value) if w)}


def _policy_words(policy: PolicySet) -> frozenset[str]:
    """Every name and value of the policy (and its parts split at -, ., /, …): a job named like one of them
    could be compared against it, so it is not remembered."""
    words: set[str] = set()

    def add(value: Any) -> None:
        if isinstance(value, str):
            words.update(_words(value))
        elif isinstance(value, dict):
            for k, v in value.items():
                add(k)
                add(v)
        elif isinstance(value, list | tuple | set | frozenset):
            for v in value:
                add(v)
        elif hasattr(value, "model_dump"):
            add(value.model_dump(mode="json"))

    for table in (policy.pools, policy.datasets, policy.checkpoints, policy.tiers, policy.quotas):
        add(table)
    add(policy.platform)
    return frozenset(w for w in words if w)


@lru_cache(maxsize=1)
def code_words() -> frozenset[str]:
    """Every string the engine's and the grammars' code holds (and its parts), messages aside: what a decision
    can compare a value with besides the policy ("default-scheduler", "Indexed", "true", a backend's name…).
    Collected from the modules' compiled code, so a new rule's literals are in it without anyone listing them."""
    words: set[str] = set()

    def walk(code: types.CodeType) -> None:
        for const in code.co_consts:
            if isinstance(const, str) and " " not in const:
                words.update(w.lower() for w in _words(const))
            elif isinstance(const, types.CodeType):
                walk(const)

    for name, module in sorted(sys.modules.items()):
        source = getattr(module, "__file__", None)
        if not name.startswith(("trainadmit.engine", "trainadmit.grammars")) or not source:
            continue
        try:
            with open(source, encoding="utf-8") as f:
                walk(compile(f.read(), source, "exec"))
        except (OSError, SyntaxError, ValueError):  # pragma: no cover - installed packages keep their sources
            continue
    return frozenset(w for w in words if w)
