"""What the `trainadmit check` tests share: the generated Jobs of `bench/check_corpus.py` (varied
shapes, about one in eight denied, a few not matched), so that tests and benchmark check the same
kind of manifests (a real program run that reports its modules: ``support.cli``)."""

from __future__ import annotations

import importlib.util
import random

from support.paths import ROOT

_spec = importlib.util.spec_from_file_location("check_corpus", ROOT / "bench" / "check_corpus.py")
check_corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_corpus)


def generated_jobs(count: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    return [check_corpus.job(rng, i) for i in range(count)]
