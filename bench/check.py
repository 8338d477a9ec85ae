"""`trainadmit check` as CI runs it: start-up, objects/s per output format, peak memory.

Run: .venv/bin/python bench/check.py [--rounds N] [--big-rounds N] [--no-10k] [--json FILE] [--baseline TREE ...]

``--baseline TREE`` (a worktree of another commit with its own ``.venv``, e.g. ``git worktree add --detach
/tmp/base 332c288 && make -C /tmp/base .venv/.installed``) adds that tree's `trainadmit check`, with its own bundled
policies, to every round: one manifest and 1,000 Jobs in each format, side by side with this tree's, same files,
same machine load, and the CPU ratio this/baseline printed.

Each case runs `trainadmit check` as a subprocess (the installed console script, as a pre-commit
hook or CI step does) and is compared with a baseline measured in the same run, interleaved round
by round, medians reported (the machines are shared and noisy):

- start-up: one manifest, against `python -c 'import json, yaml'` (the least a Python YAML tool
  pays); with the policy cache warm (every run after the first with a given policy), and cold
  (`TRAINADMIT_CACHE_DIR=` empty: the policy validated with pydantic, as on a CI runner's first call);
- 1,000 and 10,000 generated Jobs (``check_corpus.py``: varied shapes, about one in eight denied,
  a few not matched, 1-6 KB each), in each output format, against the text output;
- peak memory (maximum RSS of the process, from ``wait4``) per case.

The package is compiled to bytecode first (`python -m compileall`), as pip does when it installs
a wheel: where PYTHONDONTWRITEBYTECODE is set (these machines), an editable install would
otherwise compile every trainadmit module from source on every run.

Wall time is what a user waits for; CPU time (user + system of the process) is what the run costs.
Both are printed. The targets are judged on CPU time: on these shared machines other engineers'
work moves wall time by up to 2x within a run, and moves CPU time far less.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_corpus import write_corpus

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FORMATS = ("text", "json", "yaml")


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int, int]:
    """(wall s, cpu s, peak RSS KiB, exit code) of one process, its output discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, proc.returncode


def measure(cases: dict, envs: dict, rounds: int) -> dict:
    """Every case once per round, in turn, ``rounds`` times; medians of wall and CPU, max of RSS."""
    samples: dict = {name: [] for name in cases}
    for _ in range(rounds):
        for name, cmd in cases.items():
            samples[name].append(run(cmd, envs[name]))
    out = {}
    for name, runs in samples.items():
        codes = {r[3] for r in runs}
        out[name] = {"wall": statistics.median(r[0] for r in runs), "cpu": statistics.median(r[1] for r in runs),
                     "rss_kib": max(r[2] for r in runs), "exit": sorted(codes), "rounds": len(runs)}
    return out


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15, help="start-up rounds (default %(default)s)")
    ap.add_argument("--big-rounds", type=int, default=5,
                    help="rounds for 1,000 and 10,000 Jobs, each round every size and format (default %(default)s)")
    ap.add_argument("--no-10k", action="store_true", help="skip the 10,000-Job corpus")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--baseline", action="append", default=[], metavar="TREE",
                    help="another worktree (with its .venv) whose check runs in the same rounds")
    args = ap.parse_args()

    for tree in [ROOT, *map(Path, args.baseline)]:
        python = BIN / "python" if tree == ROOT else tree / ".venv" / "bin" / "python"
        subprocess.run([str(python), "-m", "compileall", "-q", str(tree / "webhook"), str(tree / "certs")], check=True)
    work = Path(tempfile.mkdtemp(prefix="trainadmit-bench-check-"))
    try:
        return _bench(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _bench(args: argparse.Namespace, work: Path) -> int:
    cache = work / "cache"
    warm = dict(os.environ, TRAINADMIT_CACHE_DIR=str(cache))
    cold = dict(os.environ, TRAINADMIT_CACHE_DIR="")
    sizes = [1, 1_000] + ([] if args.no_10k else [10_000])
    corpora = {n: work / f"jobs-{n}" for n in sizes}
    for n, directory in corpora.items():
        write_corpus(directory, n)
    one = next(corpora[1].glob("*.yaml"))
    check = [str(BIN / "trainadmit"), "check", "-p", str(ROOT / "policies")]
    run([*check, str(one)], warm)  # fills the policy cache, as the first run with a policy does
    results: dict = {"machine": f"{os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d")}

    print(f"start-up: one manifest, {args.rounds} interleaved rounds (medians)")
    others = {Path(tree).name: [str(Path(tree) / ".venv" / "bin" / "trainadmit"), "check", "-p",
                                str(Path(tree) / "policies")] for tree in args.baseline}
    for other in others.values():
        run([*other, str(one)], warm)
    start = measure({"baseline": [str(BIN / "python"), "-c", "import json, yaml"],
                     "check": [*check, str(one)], "check-cold": [*check, str(one)],
                     **{f"tree {name}": [*other, str(one)] for name, other in others.items()}},
                    {"baseline": warm, "check": warm, "check-cold": cold, **{f"tree {n}": warm for n in others}},
                    args.rounds)
    base = start["baseline"]
    for name, label in (("baseline", "python -c 'import json, yaml'"), ("check", "trainadmit check, policy cache warm"),
                        ("check-cold", "trainadmit check, no policy cache")):
        r = start[name]
        print(f"  {label:40s} {r['wall'] * 1000:7.1f} ms wall ({r['wall'] / base['wall']:4.2f}x)  "
              f"{r['cpu'] * 1000:7.1f} ms CPU ({r['cpu'] / base['cpu']:4.2f}x)  {r['rss_kib'] / 1024:6.1f} MiB")
    for name in others:
        r = start[f"tree {name}"]
        print(f"  {'check of ' + name + ', cache warm':40s} {r['wall'] * 1000:7.1f} ms wall ({r['wall'] / base['wall']:4.2f}x)  "
              f"{r['cpu'] * 1000:7.1f} ms CPU ({r['cpu'] / base['cpu']:4.2f}x); this tree / it: "
              f"{start['check']['cpu'] / r['cpu']:.3f}x CPU")
    results["startup"] = start

    # every size and format in each round, so that 1,000 and 10,000 Jobs meet the same machine load
    big_sizes = sizes[1:]
    print(f"\n{' and '.join(f'{n:,}' for n in big_sizes)} Jobs, {args.big_rounds} interleaved rounds (medians), "
          "against the text output")
    cases = {(n, fmt): [*check, str(corpora[n]), "-o", fmt] for n in big_sizes for fmt in FORMATS}
    cases.update({(name, fmt): [*other, str(corpora[1_000]), "-o", fmt] for name, other in others.items()
                  for fmt in FORMATS})
    measured = measure(cases, dict.fromkeys(cases, warm), args.big_rounds)  # type: ignore[arg-type]
    per_size: dict[int, dict] = {n: {fmt: measured[(n, fmt)] for fmt in FORMATS} for n in big_sizes}
    for n, r in per_size.items():
        text = r["text"]
        for fmt in FORMATS:
            x = r[fmt]
            print(f"  {n:>6,} -o {fmt:5s} {x['wall']:7.2f} s wall ({x['wall'] / text['wall']:4.2f}x)  "
                  f"{x['cpu']:7.2f} s CPU ({x['cpu'] / text['cpu']:4.2f}x)  {n / x['cpu']:5.0f} objects per CPU s  "
                  f"peak {x['rss_kib'] / 1024:6.1f} MiB ({x['rss_kib'] / text['rss_kib']:4.2f}x)  exit {x['exit']}")
        results[f"jobs_{n}"] = r
    for name in others:
        for fmt in FORMATS:
            x, mine = measured[(name, fmt)], per_size[1_000][fmt]
            print(f"  {name} 1,000 -o {fmt:5s} {x['wall']:7.2f} s wall  {x['cpu']:7.2f} s CPU  exit {x['exit']}; "
                  f"this tree / it: {mine['cpu'] / x['cpu']:.3f}x CPU ({mine['wall'] / x['wall']:.3f}x wall)")
        results[f"tree_{name}"] = {fmt: measured[(name, fmt)] for fmt in FORMATS}

    print("\ntargets (judged on CPU time; wall time in brackets moves with the other processes on the machine)")
    ratio = start["check"]["cpu"] / base["cpu"]
    wall = start["check"]["wall"] / base["wall"]
    print(f"  one manifest <= 3x python -c 'import json, yaml': {ratio:.2f}x ({wall:.2f}x wall): {verdict(ratio <= 3)}")
    k = per_size[1_000]
    for fmt in ("yaml", "json"):
        c, w = k[fmt]["cpu"] / k["text"]["cpu"], k[fmt]["wall"] / k["text"]["wall"]
        print(f"  1,000 Jobs -o {fmt} <= 1.3x text: {c:.2f}x ({w:.2f}x wall): {verdict(c <= 1.3)}")
    mem = k["json"]["rss_kib"] / k["text"]["rss_kib"]
    print(f"  1,000 Jobs -o json peak memory <= 1.5x text: {mem:.2f}x: {verdict(mem <= 1.5)}")
    if 10_000 in per_size:
        for fmt in FORMATS:
            small, big = per_size[1_000][fmt], per_size[10_000][fmt]
            change = (10_000 / big["cpu"]) / (1_000 / small["cpu"]) - 1
            wall_change = (10_000 / big["wall"]) / (1_000 / small["wall"]) - 1
            print(f"  10,000 Jobs -o {fmt} objects/s within 10% of 1,000's: {10_000 / big['cpu']:.0f} vs "
                  f"{1_000 / small['cpu']:.0f} per CPU second, {change:+.1%} ({wall_change:+.1%} wall); peak memory "
                  f"{big['rss_kib'] / 1024:.1f} vs {small['rss_kib'] / 1024:.1f} MiB: {verdict(abs(change) <= 0.10)}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
