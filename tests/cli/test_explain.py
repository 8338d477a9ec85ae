"""`check --explain` names the right file and line for every built-in rule and every injected field."""

from __future__ import annotations

import pytest
from support.builders import job
from support.manifests import load_yaml
from support.paths import EXAMPLES, POLICIES, ROOT
from support.policies import BACKENDS, write_policy

from trainadmit.authoring.explain import Explainer
from trainadmit.engine import RULES, Request, decide, load_policy
from trainadmit.engine.paths import get_path


def _declared_at(text: str) -> tuple[str, int]:
    where = text.rsplit("declared at ", 1)[1].split(";")[0]
    file, line = where.rsplit(":", 1)
    return file, int(line)


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_every_builtin_rule_points_at_its_declaration(policy, rule_id):
    file, line = _declared_at(Explainer(policy, POLICIES).rule(rule_id))
    assert file.startswith("webhook/")  # the repository's folder of the trainadmit package
    source = (ROOT / file).read_text().splitlines()
    # the declaration may wrap: the id is on the declared line or the line after it
    assert f'"{rule_id}"' in source[line - 1] + source[line], (file, line)


def test_an_override_names_the_line_of_platform_spec_rules(policy):
    text = Explainer(policy, POLICIES).rule("storage.shm-exceeds-memory")
    override = text.split("action set at ")[1]
    file, line = override.rsplit(":", 1)
    assert "storage.shm-exceeds-memory: warn" in (POLICIES / file).read_text().splitlines()[int(line) - 1]


def _cases():
    objs = [d for p in sorted(EXAMPLES.glob("*.yaml")) for d in load_yaml(p)]
    user_set = job(name="user-rdma", annotations={"trainadmit.io/topology": "rack"},
                   container={"resources": {"limits": {"nvidia.com/gpu": 8, "rdma/rdma_shared_device_a": "1"},
                                            "requests": {"rdma/rdma_shared_device_a": "1"}}})
    return [*objs, user_set]


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def policy_dir(request, tmp_path_factory):
    return write_policy(tmp_path_factory.mktemp(request.param), BACKENDS[request.param])


def test_every_injected_field_points_at_the_policy_line_that_prescribed_it(policy_dir):
    policy = load_policy(policy_dir)
    explainer = Explainer(policy, policy_dir)
    checked = 0
    for obj in _cases():
        decision = decide(policy, Request(obj))
        for inj in decision.injections:
            # it is in the output and was not in the input: injected, not the user's own value
            assert get_path(decision.mutated, inj.location, "<absent>") != "<absent>", inj.path
            assert get_path(obj, inj.location, "<absent>") == "<absent>", f"{inj.path} was set by the user"
            ref = explainer.injection(inj.source)
            if inj.source.kind == "object":
                continue
            file, line = ref.rsplit(":", 1)
            text = (policy_dir / file).read_text().splitlines()[int(line) - 1]
            last = next((p for p in reversed(inj.source.field) if isinstance(p, str)), None)
            if isinstance(inj.source.field[-1], int):
                assert text.lstrip().startswith("- "), (inj.path, ref, text)
            else:
                assert f"{last}:" in text or f'"{last}":' in text, (inj.path, ref, text)
            checked += 1
    assert checked > 20
