"""What every command shares: exit codes (docs/cli.md) and loading a policy with a readable error."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..policy import PolicySet

EXIT_OK, EXIT_DENIED, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a process a Ctrl-C ended
# what each command may exit with (docs/cli.md); the bad-input battery holds every command to it
EXIT_CODES = (EXIT_OK, EXIT_DENIED, EXIT_ERROR, EXIT_INTERRUPTED)
DEFAULT_POLICY_DIR = os.environ.get("TRAINADMIT_POLICY_DIR", "policies")


def path_arg(text: str) -> str:
    """A file or directory argument (an argparse type): an empty one is a usage error, not the
    current directory, which is what ``Path("")`` would quietly become."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return text


def add_cluster_args(parser: argparse.ArgumentParser, reads: str) -> None:
    """``--kubeconfig`` and ``--context``: a live cluster read read-only, the same for every command that reads
    one (``reads`` says what it reads there)."""
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help=f"read a live cluster instead, read-only ({reads}); --kubeconfig= (empty) takes the "
                        "Pod's service account, else $KUBECONFIG or ~/.kube/config")
    parser.add_argument("--context", help="the kubeconfig context of that cluster (implies the live cluster; "
                        "default: the kubeconfig's current context)")


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def dns_label(text: str) -> str:
    """A Kubernetes object name that must be a DNS-1123 label (a Service, a namespace): what the
    apiserver itself would refuse is a usage error here."""
    if not _DNS_LABEL.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a DNS-1123 label (lowercase letters, digits and '-', "
                                         "at most 63)")
    return text


def policy_cache_dir() -> Path | None:
    """Where `check` keeps validated policy sets (``trainadmit.policy.cache``): $TRAINADMIT_CACHE_DIR
    (set but empty: no cache), else the user's cache directory ($XDG_CACHE_HOME or ~/.cache)."""
    configured = os.environ.get("TRAINADMIT_CACHE_DIR")
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trainadmit"


def load_policy_or_report(path: str, cache_dir: Path | None = None) -> PolicySet | None:
    """The policy set, or None after printing every problem with its file, line and field.

    With ``cache_dir``, a set validated before from the same bytes comes from the policy cache.
    The engine is imported here, not at the top: `trainadmit preflight` runs in every training Pod's
    init container and must not pay for the policy models and CEL it never uses."""
    from ..engine import load_policy
    from ..policy import PolicyError

    try:
        if cache_dir is not None:
            from ..policy.cache import load_policy_cached

            return load_policy_cached(path, load_policy, cache_dir)
        return load_policy(path)
    except PolicyError as exc:
        if len(exc.problems) == 1:  # one line, as every other startup error
            print(f"trainadmit: invalid policy in {path}: {exc.problems[0]}", file=sys.stderr)
            return None
        print(f"trainadmit: invalid policy in {path}:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None
