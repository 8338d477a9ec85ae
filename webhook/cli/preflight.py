"""`trainadmit preflight`: the start-up check of a training Pod (the init container trainadmit injects).

Exit 0 when every check passed, 1 when one failed or the time budget ran out (one line on stderr
names the node and what is wrong; the JSON result is in the termination message), 2 for arguments it
does not understand (argparse).
"""

from __future__ import annotations

import argparse
import os
import sys

from ..grammars.preflight import expectations_from
from ..preflight import Host, report, run
from .common import EXIT_DENIED, EXIT_OK


def cmd_preflight(args: argparse.Namespace) -> int:
    host = Host.from_environment(args.root, node=args.node)
    result, stuck = run(expectations_from(args), host)
    report(result, host, args.termination_log)
    if stuck:  # a check is blocked in the kernel (a hung mount): its thread would keep the process alive
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_DENIED)
    return EXIT_OK if result.ok else EXIT_DENIED
