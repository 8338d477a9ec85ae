"""What cel-expr-python keeps of an evaluation, by way of calling it: bytes per evaluation (tracemalloc).

  .venv/bin/python bench/cel_kept.py

A minimal reproduction with the library alone (nothing of trainadmit): the same expression with a Python
host function called through every door the library offers (``eval(data=)``, an Activation re-used or new
per call, an explicit arena, ``function_impls``, a member overload), then without a host function. Then
the objects left behind, counted with the collector off: the argument tuple the library builds for each
call, with one reference nobody releases. Bytes are counted, not timed, so a loaded machine changes
nothing.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections import Counter
from collections.abc import Callable

from cel_expr_python import cel

T = cel.Type
DATA = {"object": {"m": "128Mi", "n": 5000, "env": [{"name": f"S{k}", "value": f"v{k}"} for k in range(200)]}}
RESULTS: list[str] = []


def fresh(value: str) -> str:
    """A host function returning a new object, the last one kept in RESULTS so its references can be counted."""
    RESULTS.clear()
    RESULTS.append(value + "!")
    return RESULTS[-1]


def per_eval(run: Callable[[], object], count: int = 4000) -> float:
    for _ in range(200):
        run()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(count):
            run()
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - before) / count
    finally:
        tracemalloc.stop()


def extra_refs_on_result(run: Callable[[], object]) -> int | None:
    RESULTS.clear()
    run()
    return sys.getrefcount(RESULTS[0]) - 2 if RESULTS else None  # RESULTS and getrefcount's argument


def env_with(overload: object, **kw: object):
    return cel.NewEnv(variables={"object": T.DYN}, functions=[overload], **kw)


def main() -> None:
    string_fn = cel.FunctionDecl("f", [cel.Overload("f_string", T.STRING, [T.STRING], False, fresh)])
    env = env_with(string_fn)
    program = env.compile("f(object.m) != ''")
    reused = env.Activation(DATA)
    impls = env_with(cel.FunctionDecl("f", [cel.Overload("f_string", T.STRING, [T.STRING], False)]),
                     function_impls={"f_string": fresh}).compile("f(object.m) != ''")
    member = env_with(cel.FunctionDecl("g", [cel.Overload("string_g", T.STRING, [T.STRING], True, fresh)])
                      ).compile("object.m.g() != ''")
    ints = env_with(cel.FunctionDecl("k", [cel.Overload("k_int", T.INT, [T.INT], False, lambda x: x + 1000)])
                    ).compile("k(object.n) > 0")
    no_args = env_with(cel.FunctionDecl("z", [cel.Overload("z_", T.BOOL, [], False, lambda: True)])).compile("z()")
    plain = env.compile("object.m.startsWith('12') && object.env.all(e, e.name.startsWith('S'))")
    assert program.eval(data=DATA).plain_value() is True and plain.eval(data=DATA).plain_value() is True
    ways: list[tuple[str, Callable[[], object]]] = [
        ("host function f(string) -> new string, eval(data=)", lambda: program.eval(data=DATA)),
        ("  the same, one Activation re-used", lambda: program.eval(reused)),
        ("  the same, a new Activation per call", lambda: program.eval(env.Activation(DATA))),
        ("  the same, eval(data=, arena=Arena()) per call", lambda: program.eval(data=DATA, arena=cel.Arena())),
        ("  the same, NewEnv(function_impls=)", lambda: impls.eval(data=DATA)),
        ("  the same, a member overload", lambda: member.eval(data=DATA)),
        ("host function k(int) -> new int", lambda: ints.eval(data=DATA)),
        ("host function z() -> True (no argument)", lambda: no_args.eval(data=DATA)),
        ("no host function, 200-item comprehension", lambda: plain.eval(data=DATA)),
    ]
    print(f"cel-expr-python, Python {sys.version.split()[0]}")
    print(f"{'way of calling':55s} {'bytes kept/eval':>15s}  extra refs on the returned object")
    for label, run in ways:
        print(f"{label:55s} {per_eval(run):15.1f}  {extra_refs_on_result(run)}")

    gc.collect()
    gc.disable()  # a new tuple is tracked until a collection untracks it: count them before one runs
    try:
        before = Counter(type(o).__name__ for o in gc.get_objects())
        for _ in range(1000):
            program.eval(data=DATA)
        after = Counter(type(o).__name__ for o in gc.get_objects())
        left = [o for o in gc.get_objects() if type(o) is tuple and o == ("128Mi",)]
    finally:
        gc.enable()
    grown = {k: after[k] - before[k] for k in after if after[k] - before[k] >= 100}
    print(f"\nobjects grown over 1,000 evaluations of f(object.m): {grown}")
    if left:
        print(f"{len(left)} tuples ('128Mi',) left; references to one besides ours: "
              f"{sys.getrefcount(left[-1]) - 2}; to its string besides the tuple: {sys.getrefcount(left[-1][0]) - 2}")
    print("so the library keeps one reference to the argument tuple it builds (and with it the converted "
          "arguments) and one to the value returned")


if __name__ == "__main__":
    main()
