"""wrk (Debian package `wrk`) POSTing one AdmissionReview over keep-alive HTTPS connections: the Lua script
and the result parser that bench/serve.py and bench/hardening.py share."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = io.open("%s"):read("*a")
done = function(summary, latency, requests)
  io.write(string.format("RESULT %%d %%d %%f %%f %%d %%d %%d %%d %%d\\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), summary.errors.status, summary.errors.connect,
    summary.errors.read, summary.errors.write, summary.errors.timeout))
end
"""
SOCKET_ERRORS = ("connect", "read", "write", "timeout")


def start(url: str, body: bytes, connections: int, seconds: float) -> subprocess.Popen:
    """wrk running in the background for ``seconds`` (3 s per-request timeout, as the webhook's)."""
    tmp = Path(tempfile.mkdtemp(prefix="trainadmit-wrk-"))
    (tmp / "review.json").write_bytes(body)
    (tmp / "post.lua").write_text(LUA % (tmp / "review.json"))
    return subprocess.Popen(["wrk", "-t", str(min(2, connections)), "-c", str(connections), "-d", f"{seconds:.0f}s",
                             "--timeout", "3s", "-s", str(tmp / "post.lua"), url], stdout=subprocess.PIPE, text=True)


def result(proc: subprocess.Popen) -> dict:
    """Requests, requests/s, p50/p99 in ms, non-2xx answers and socket errors (in total and by kind)."""
    out = proc.communicate()[0]
    m = re.search(r"RESULT (\d+) (\d+) ([\d.]+) ([\d.]+) (\d+) (\d+) (\d+) (\d+) (\d+)", out)
    if not m:
        raise SystemExit(f"unexpected wrk output:\n{out}")
    n, dur, p50, p99, status, *socket_errors = (float(x) for x in m.groups())
    return {"requests": int(n), "rps": n / (dur / 1e6), "p50_ms": p50 / 1000, "p99_ms": p99 / 1000,
            "non_2xx": int(status), "socket_errors": int(sum(socket_errors)),
            "errors_by_kind": dict(zip(SOCKET_ERRORS, map(int, socket_errors), strict=True))}


def run(url: str, body: bytes, connections: int, seconds: float) -> dict:
    return result(start(url, body, connections, seconds))
