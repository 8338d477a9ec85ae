"""Compare CEL implementations from PyPI on Kubernetes-style expressions: correctness and speed.

Run in an environment that has all three installed:
  python -m venv /tmp/cel && /tmp/cel/bin/pip install cel-expr-python common-expression-language cel-python pyyaml
  /tmp/cel/bin/python bench/cel_candidates.py

Each expression is evaluated over a captured AdmissionReview (`object`, `request`) and compared with
the answer Kubernetes' CEL gives (written next to it, derived by hand from the CEL spec).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
REQ = json.loads((SHARED / "fixtures/admission-reviews/job-03-mutate-Job-CREATE.json").read_text())["review"]["request"]
DATA = {"object": REQ["object"], "request": {"operation": REQ["operation"], "namespace": REQ["namespace"],
                                             "resource": REQ["resource"], "userInfo": REQ["userInfo"]}}

CASES = [
    ("has(object.metadata.labels) && object.metadata.labels.exists(k, k.startsWith('trainadmit.io/'))", True),
    ("object.spec.template.spec.containers.exists(c, has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits)", True),
    ("object.spec.template.spec.containers.all(c, c.image.startsWith('registry.local/'))", True),
    ("has(object.spec.template.spec.nodeSelector)", False),
    ("object.spec.parallelism == object.spec.completions", True),
    ("size(object.spec.template.spec.containers) <= 4", True),
    ("request.resource.resource == 'jobs' ? object.spec.completionMode == 'Indexed' : false", True),
    ("object.metadata.annotations['trainadmit.io/priority'] in ['high', 'normal']", True),
    ("object.spec.template.spec.containers.map(c, c.name).exists(n, n.matches('^train'))", True),
    ("int(object.spec.template.spec.containers[0].resources.limits['nvidia.com/gpu']) * object.spec.parallelism", 32),
    ("request.userInfo.groups.exists(g, g == 'system:masters')", True),
    ("object.metadata.name.lowerAscii() == 'llama-pretrain'", True),
]


def run_celexpr():
    from cel_expr_python import cel
    from cel_expr_python.ext import ext_strings

    env = cel.NewEnv(variables={"object": cel.Type.DYN, "request": cel.Type.DYN},
                     extensions=[ext_strings.ExtStrings()] if hasattr(ext_strings, "ExtStrings") else None)
    progs = [env.compile(e) for e, _ in CASES]
    return lambda i: progs[i].eval(data=DATA).plain_value()


def run_rust():
    import cel

    progs = [cel.compile(e) for e, _ in CASES]
    return lambda i: progs[i].execute(DATA)


def run_celpy():
    import celpy

    env = celpy.Environment()
    progs = [env.program(env.compile(e)) for e, _ in CASES]
    act = {"object": celpy.json_to_cel(DATA["object"]), "request": celpy.json_to_cel(DATA["request"])}
    return lambda i: progs[i].evaluate(act)


def main() -> None:
    for name, make in (("cel-expr-python", run_celexpr), ("common-expression-language", run_rust),
                       ("cel-python", run_celpy)):
        try:
            evaluate = make()
        except Exception as exc:
            print(f"{name}: setup failed: {exc!r}")
            continue
        correct, times = 0, []
        wrong = []
        for i, (expr, expected) in enumerate(CASES):
            try:
                got = evaluate(i)
                ok = got == expected
            except Exception as exc:
                got, ok = f"error {type(exc).__name__}: {str(exc)[:60]}", False
            correct += ok
            if not ok:
                wrong.append((expr[:60], got))
            n = 300
            start = time.perf_counter()
            for _ in range(n):
                with contextlib.suppress(Exception):
                    evaluate(i)
            times.append((time.perf_counter() - start) / n)
        times.sort()
        print(f"{name}: {correct}/{len(CASES)} correct; median {times[len(times) // 2] * 1e6:.1f} µs per evaluation")
        for expr, got in wrong:
            print(f"   wrong: {expr!r} -> {got!r}")


if __name__ == "__main__":
    sys.exit(main())
