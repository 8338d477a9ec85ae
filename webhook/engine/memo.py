"""Decisions remembered per policy generation, keyed by what the built-in engine actually reads.

A decision costs far more than parsing the request (patch operations, intent resolution, a dozen
concerns), yet training jobs come in a few shapes: the same pool, intent, container layout and
settings, with a different name, image, command or run id. ``Memo`` keys a decision by a
*projection* of the object: the object without what the built-in engine never reads (container
image, command, args, probes, ports, non-NCCL env values, apiserver bookkeeping such as uid,
managedFields and status, kubectl's last-applied annotation), with its name replaced by a sentinel
(and its uid, where the apiserver copied it into the object: a Job's controller-uid selector and
template labels, which /validate sees).

Correct by construction, not by a list of "fields that matter": on a miss the built-in engine runs
*on the projection itself*, so its result is a function of the key. The name is replaced by the
sentinel wherever it occurs as a whole token (``metadata.name``, and in what trainadmit derived from
it on an earlier pass: PodGroup names, pod-affinity selectors, the preflight's gang id), so jobs of
one shape share an entry whatever they are called. That replacement is only sound if the engine
treats the name as an opaque token, so a miss also computes the decision for the real object and
remembers the entry only when the two agree (after the sentinel is given the real name back); names
that equal a value the policy or the engine compares against (a pool, a queue, "default"…) are never
memoized. Whatever the decision asked the cluster view (pool sizes, domain sizes, quota) is
recorded with the answers; a hit replays those questions and only counts when every answer is
unchanged. Custom CEL rules read any field, so they always run, on the real object (mutated, on
``/mutate``). Objects the memo cannot key safely (no name to substitute cleanly, a name long enough
to change how labels are derived, a malformed object, anything but CREATE) take the plain path.

``tests/test_memo.py`` checks over generated objects, policies and cluster states that a remembered
decision equals the one computed from scratch.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from ..grammars.cel import object_reads
from ..policy import PolicySet
from ..policy.vocab import Action
from .clusterview import ClusterView, NoCluster
from .concerns import custom
from .context import Context
from .decide import decide, decide_builtin, exempt_user
from .decision import Decision, Violation
from .patch import Patcher
from .paths import get_path
from .request import Request
from .workloads import workload_of

SENTINEL = "trainadmit0memo0name0x"  # a valid object name no real request carries
UID_SENTINEL = "00000000-7a3e-4d0e-9e40-0000trainadm"  # likewise for metadata.uid
MAX_NAME = 50  # longer names change derived label values (hashed to 63 characters): not memoized
MIN_NAME = 3
# strings the engine compares values against, whose tokens a name must not be
_ENGINE_WORDS = frozenset({"default", "scheduler", "default-scheduler", "true", "false", "none", "any", "indexed",
                           "nonindexed", "memory", "never", "exists", "equal", "gang", "native", "coscheduling",
                           "volcano", "kueue", "node", "rack", "zone", "block", "pod", "job", "trainadmit"})
_DROP_METADATA = frozenset({"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
                            "deletionTimestamp", "deletionGracePeriodSeconds"})
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# fields the built-in engine never reads, wherever they are (regular containers, and operators' job
# specs); init containers are kept whole (the preflight concern reads its own one's image and args)
_NEVER_READ = frozenset({"image", "command", "args", "workingDir", "ports", "livenessProbe", "readinessProbe",
                         "startupProbe", "lifecycle", "terminationMessagePath", "terminationMessagePolicy",
                         "imagePullPolicy", "stdin", "stdinOnce", "tty", "resizePolicy", "entrypoint",
                         "runtimeEnvYAML"})


class _Unkeyable(Exception):
    """A value the key's serialization would not tell apart (NaN, ±inf: orjson writes null)."""


def _project(value: Any) -> Any:
    """A copy without the fields the engine never reads; env values only for NCCL variables."""
    if type(value) is list:
        return [_project(v) if type(v) in _CONTAINERS else _finite(v) if type(v) is float else v for v in value]
    out = {}
    for key, item in value.items():
        kind = type(item)
        if kind not in _CONTAINERS:
            if key not in _NEVER_READ:
                out[key] = _finite(item) if kind is float else item
        elif key == "env" and kind is list:
            out[key] = [_env(e) for e in item]
        elif key == "initContainers":
            out[key] = item  # kept whole: the preflight concern compares its own init container's image and args
        elif key not in _NEVER_READ:
            out[key] = _project(item)
    return out


_CONTAINERS = (dict, list)


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise _Unkeyable
    return value


def _env(entry: Any) -> Any:
    """An env entry as the engine reads it: every name, NCCL values, and whether a value comes from a ref."""
    if type(entry) is not dict:
        return entry
    name = entry.get("name")
    if type(name) is str and name.startswith("NCCL_"):
        return entry
    out = {"name": name}
    if "value" in entry:
        value = entry["value"]
        out["value"] = "" if type(value) is str else value  # a wrong type stays: the shape check sees it
    if "valueFrom" in entry:
        out["valueFrom"] = {}
    return out


def project(obj: dict) -> dict:
    """The object without what the built-in engine never reads (the memo then gives the name's tokens
    the sentinel, and keys by the result)."""
    meta = obj.get("metadata") or {}
    pmeta = {k: v for k, v in meta.items() if k not in _DROP_METADATA}
    annotations = pmeta.get("annotations")
    if type(annotations) is dict and type(annotations.get(_LAST_APPLIED)) is str:
        pmeta["annotations"] = {k: v for k, v in annotations.items() if k != _LAST_APPLIED}
    out = {k: _project(v) if type(v) is dict or type(v) is list else v for k, v in obj.items()
           if k not in ("metadata", "status")}
    out["metadata"] = _project(pmeta)
    return out


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
    """A decision of the built-in engine on a projection, with the name as the sentinel."""

    matched: bool
    reason: str
    violations: tuple[tuple[str, str, str, str, str], ...]  # (rule, action, path, message, hint)
    patch_json: str
    cluster_calls: tuple[tuple[str, tuple, Any], ...]
    constant_view: type | None  # the class of a view whose answers never change, when computed with one

    def still_holds(self, cluster: ClusterView) -> bool:
        if self.constant_view is not None and type(cluster) is self.constant_view:
            return True
        return all(getattr(cluster, name)(*args) == answer for name, args, answer in self.cluster_calls)


class Memo:
    """Remembered decisions of one policy generation. Safe to share between threads without a lock
    (a dict's get and set are atomic); bounded: a full table starts over, which costs one miss per shape."""

    def __init__(self, policy: PolicySet, size: int = 4096):
        self.policy = policy
        self.size = size
        self._entries: dict[str, _Entry] = {}
        self._cel: dict[tuple[str, str], tuple[Violation, ...]] = {}
        self._reads = object_reads([p.source for rule in policy.compiled_rules for p in rule.programs])
        self._risky = _policy_words(policy) | _ENGINE_WORDS
        self.hits = self.misses = self.bypassed = 0

    def decide(self, request: Request, cluster: ClusterView | None = None) -> Decision:
        """Equal to ``decide(policy, request, cluster)`` for what a webhook answers (allowed, every
        violation, the patch): ``Decision.patch_json`` is set, ``mutated`` and ``injections`` are not."""
        policy, cluster = self.policy, cluster or NoCluster()
        obj, namespace = request.obj, request.effective_namespace
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if request.operation != "CREATE" or not isinstance(meta, dict) or not _nameable(name):
            self.bypassed += 1
            return decide(policy, request, cluster)
        try:  # orjson: the key's text in ~1/8 of json.dumps' time
            text = orjson.dumps(project(obj)).decode()
        except (_Unkeyable, TypeError):  # orjson.JSONEncodeError is a TypeError (an int beyond 64 bits, …)
            self.bypassed += 1
            return decide(policy, request, cluster)
        if SENTINEL in text or (name is not None and name in self._risky):
            self.bypassed += 1
            return decide(policy, request, cluster)
        if name is not None:  # usually the name occurs once, as the whole metadata.name value
            text = text.replace(name, SENTINEL) if text.count(name) == 1 else _tokens_replaced(text, name, SENTINEL)
        uid = meta.get("uid")  # dropped from the projection; what the apiserver derived from it is not (a
        if not (isinstance(uid, str) and len(uid) >= 8 and uid in text):  # Job's controller-uid labels at /validate)
            uid = None
        elif UID_SENTINEL in text:
            self.bypassed += 1
            return decide(policy, request, cluster)
        else:
            text = text.replace(uid, UID_SENTINEL)
        # an exempt user's decision names the user: the reason is part of the key
        key = f"{request.phase}|{namespace}|{exempt_user(policy, request.user)}|{text}"
        key = _digest(key)
        entry = self._entries.get(key)
        if entry is None or not entry.still_holds(cluster):
            self.misses += 1
            entry, fresh = self._compute(request, text, name, uid, namespace, cluster)
            if entry is None:  # the name is not opaque to this decision: answer from scratch, remember nothing
                self.bypassed += 1
                return decide(policy, request, cluster) if policy.compiled_rules else fresh
            self._remember(self._entries, key, entry)
        else:
            self.hits += 1
        decision = self._instantiate(entry, request, name, uid)
        if entry.matched and policy.compiled_rules:
            decision.violations.extend(self._custom_rules(key, request, decision.patch_json or "[]", namespace,
                                                          cluster))
        return decision

    def _remember(self, table: dict, key: Any, value: Any) -> None:
        if len(table) >= self.size:
            table.clear()
        table[key] = value

    def _compute(self, request: Request, text: str, name: str | None, uid: str | None, namespace: str | None,
                 cluster: ClusterView) -> tuple[_Entry | None, Decision]:
        """The entry for a projection (``text``, the name and uid as sentinels), and the fresh built-in
        decision for the real object; no entry when giving the sentinels the real values back does not
        give the fresh decision."""
        recorder = _Recorder(cluster)

        def builtin(obj: dict, view: ClusterView) -> Decision:
            return decide_builtin(self.policy, Request(obj, request.operation, request.old, namespace, request.user,
                                                       request.dry_run, request.phase), view)

        d = builtin(json.loads(text), recorder)  # type: ignore[arg-type]
        violations = tuple((v.rule, v.action.value, v.path, v.message, v.hint) for v in d.violations)
        constant = type(cluster) if getattr(cluster, "constant", False) else None
        entry = _Entry(d.matched, d.reason, violations, json.dumps(d.patch, separators=(",", ":")),
                       tuple(recorder.calls), constant)
        fresh = builtin(request.obj, cluster)
        mine = self._instantiate(entry, request, name, uid)
        agree = (mine.matched == fresh.matched and _texts(mine.violations) == _texts(fresh.violations)
                 and (not fresh.matched or json.loads(mine.patch_json or "[]")
                      == (fresh.patch if request.phase != "validate" else [])))
        return (entry if agree else None), fresh

    def _instantiate(self, entry: _Entry, request: Request, name: str | None, uid: str | None) -> Decision:
        def sub(text: str) -> str:
            if name is not None:
                text = text.replace(SENTINEL, name)
            return text.replace(UID_SENTINEL, uid) if uid is not None else text
        violations = [Violation(r, Action(a), sub(p), sub(m), sub(h)) for r, a, p, m, h in entry.violations]
        decision = Decision(matched=entry.matched, reason=sub(entry.reason), violations=violations,
                            generation=self.policy.generation)
        patch_json = sub(entry.patch_json) if request.phase != "validate" else None
        decision.patch_json = patch_json if patch_json != "[]" else None  # no patch: like a fresh decision's []
        return decision

    def _custom_rules(self, key: bytes, request: Request, patch_json: str, namespace: str | None,
                      cluster: ClusterView) -> list[Violation]:
        """CEL rules see the object as it will be stored: the real object, mutated on /mutate. Their
        result depends on the memo key (which fixes the patch) and on the real values of the paths their
        expressions name (``reads``), so it is remembered under both."""
        reads = self._reads
        cel_key = None
        if reads is not None:
            parts = [get_path(request.obj, path, None) for path in reads[0]]
            if reads[1]:
                fields = {"operation": request.operation, "namespace": namespace, "userInfo": request.user,
                          "dryRun": request.dry_run, "name": (request.obj.get("metadata") or {}).get("name")}
                # request.kind is the object's kind, already in the memo key
                parts.append([fields if f == "*" else fields.get(f) for f in reads[1] if f != "kind"])
            cel_key = (key, _digest(json.dumps(parts, separators=(",", ":"), default=str)))
            found = self._cel.get(cel_key)
            if found is not None:
                return list(found)
        obj = request.obj
        if request.phase != "validate":
            patcher = Patcher(obj)
            for op in json.loads(patch_json):
                _replay(patcher, op)
            obj = patcher.doc
        workload = workload_of(obj)
        ctx = Context(self.policy, cluster, request, workload, Patcher(obj), namespace=namespace or "default")
        custom.validate(ctx, workload)
        if cel_key is not None:
            self._remember(self._cel, cel_key, tuple(ctx.violations))
        return ctx.violations


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
    return [(v.rule, v.action, v.path, v.message, v.hint) for v in violations]


def _policy_words(policy: PolicySet) -> frozenset[str]:
    """Every name and value of the policy (and its parts split at -, ., /): a job named like one of them
    could be compared against it, so it is not memoized."""
    words: set[str] = set()

    def add(value: Any) -> None:
        if isinstance(value, str):
            words.add(value)
            words.update(re.split(r"[-./=,:@]", value))
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


def _replay(patcher: Patcher, op: dict) -> None:
    """Apply one operation of a patch the engine produced (add/replace on maps, append to lists)."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
    append = tokens and tokens[-1] == "-"
    if append:
        tokens.pop()
    path: list[str | int] = []
    cur: Any = patcher.doc
    for token in tokens:  # list indices are numbers in a path, keys otherwise
        part: str | int = int(token) if type(cur) is list else token
        path.append(part)
        cur = cur[part] if type(cur) is list else (cur.get(part) if type(cur) is dict else None)
    if append:
        patcher.append(tuple(path), op["value"])
    else:
        patcher.set(tuple(path), op["value"])
