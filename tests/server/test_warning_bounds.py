"""The warnings the server returns are what kubectl shows: the apiserver relays them whole while their total is
within 4096 characters and cuts every one to 256 once it is not (k8s.io/apiserver/pkg/endpoints/filters/warning.go),
which would cut off the advice a warning ends with. Hand-made warnings: no policy produces this many this long."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainadmit.server.admission import decision_response


@dataclass
class _Finding:
    rule: str
    path: str
    message: str
    hint: str = ""


@dataclass
class _Decision:
    warnings: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    allowed: bool = True
    patch: list = field(default_factory=list)


def _texts(decision) -> list[str]:
    return decision_response("uid", decision, False)["response"].get("warnings", [])


def test_a_long_warning_reaches_kubectl_whole_with_its_advice():
    advice = "start kube-apiserver with --feature-gates=GenericWorkload=true " * 10  # 630 characters
    [text] = _texts(_Decision([_Finding("gang.unavailable", "metadata", "no gang scheduler is served", advice)]))
    assert text.endswith(f"({advice})")  # a 512-character cut lost it


def test_many_warnings_stay_within_the_apiservers_total_and_say_how_many_were_left_out():
    findings = [_Finding(f"custom.r{i}", "metadata", "x" * 700) for i in range(10)]
    texts = _texts(_Decision(findings))
    assert sum(map(len, texts)) <= 4096
    assert all(t.endswith("x" * 700) for t in texts[:-1])  # whole
    assert texts[-1] == f"trainadmit: {10 - len(texts) + 1} more warnings (trainadmit check shows all of them)"


def test_one_overlong_warning_is_cut_to_its_bound():
    [text] = _texts(_Decision([_Finding("custom.r", "metadata", "y" * 5000)]))
    assert len(text) == 1024 and text.endswith("...")
