"""Security properties that need no cluster (issue 33): key files written safely under any umask, and lint's warning
on a controller account in a namespace the policy's users work in. (The attacks on a real apiserver:
tests/integration/test_security_on_apiserver.py.)"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

from support.paths import ROOT
from support.policies import write_policy


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_certs_issue_under_umask_000_with_planted_temp_files_writes_keys_0600(tmp_path):
    """Pre-made 0666 temp files (and a symlink planted at one) in the output directory: on main `certs issue` opened
    them without O_EXCL/O_NOFOLLOW and left ca.key and tls.key 0666 (and followed the symlink)."""
    out = tmp_path / "certs"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("not a key")
    for name in ("ca.key", "tls.key", "ca.crt"):
        planted = out / f".{name}.tmp"
        planted.write_text("planted")
        os.chmod(planted, 0o666)
    os.symlink(victim, out / ".tls.crt.tmp")
    fresh = tmp_path / "new" / "dir"
    script = ("import os, sys; os.umask(0); from trainadmit.cli.main import main; "
              "sys.exit(main(sys.argv[1:]))")
    for target in (out, fresh):
        done = subprocess.run([sys.executable, "-c", script, "certs", "issue", "--out", str(target)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert _mode(target / "ca.key") == 0o600 and _mode(target / "tls.key") == 0o600
        assert _mode(target / "tls.crt") == 0o644 and _mode(target / "ca.crt") == 0o644
        assert not any(p.name.endswith(".tmp") for p in target.iterdir())
    assert victim.read_text() == "not a key" and not (out / "tls.crt").is_symlink()
    assert _mode(fresh) == 0o700  # the directory it created, whatever the umask


def test_lint_warns_on_a_controller_account_in_a_namespace_a_quota_covers(tmp_path):
    """`default:kuberay-operator` (what main trusted by default) named in Platform.spec.controllers, while the bundled
    Quota `teams` covers namespace default: lint warns (the policy still loads)."""
    from trainadmit.authoring.lint import lint

    clean, _ = lint(write_policy(tmp_path / "bundled"))
    assert not [f for f in clean if "is trusted as a controller" in f.message]
    policy = write_policy(tmp_path / "minted", {"controllers": {
        "rayclusters.ray.io": ["system:serviceaccount:default:kuberay-operator"]}})
    findings, unreadable = lint(policy)
    warned = [f for f in findings if "is trusted as a controller" in f.message]
    assert not unreadable and len(warned) == 1 and warned[0].severity == "warning"
    assert "system:serviceaccount:default:kuberay-operator" in warned[0].message and warned[0].file.endswith(
        "quotas.yaml")


def test_the_fences_are_generated_and_name_what_the_code_writes(policy):
    """deploy/'s ValidatingAdmissionPolicies are current, and fence exactly the names the code writes."""
    from trainadmit.authoring import fences
    from trainadmit.certs.incluster import SECRET, WEBHOOK_CONFIGURATION
    from trainadmit.cluster.budget import BUDGET_NAME
    from trainadmit.cluster.preflight_status import POD_OWNERS

    for relative in fences.FILES:
        assert (ROOT / "deploy" / relative).read_text() == fences.render(relative), \
            "regenerate: python -m trainadmit.authoring.fences deploy"
    assert fences.PATCHED_WORKLOADS == POD_OWNERS
    assert policy.keys.preflight == fences.ANNOTATION and fences.BUDGET == BUDGET_NAME
    assert fences.SECRET == SECRET and fences.WEBHOOKS == WEBHOOK_CONFIGURATION
    assert set(fences.EXEMPT) == set(policy.platform.exemptNamespaces)
    kustomization = (ROOT / "deploy" / "base" / "kustomization.yaml").read_text()
    assert all(f"- {r.split('/', 1)[1]}" in kustomization for r in fences.FILES if r.startswith("base/"))


def test_tls_1_2_offers_only_forward_secret_aead_suites(tmp_path):
    import ssl

    from trainadmit.certs import pki
    from trainadmit.server.runtime import CertStore

    pki.issue(tmp_path, "trainadmit", "trainadmit-system")
    context = CertStore(tmp_path / "tls.crt", tmp_path / "tls.key").context()
    tls12 = [c for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 and all(c["aead"] and c["kea"] == "kx-ecdhe" for c in tls12), [c["name"] for c in tls12]
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_readyz_shows_no_file_or_line_of_the_policy_directory():
    from trainadmit.server.app import without_paths

    shown = without_paths("/policies/..2026_12_02/pools.yaml:12: error: spec.gpu.perNode: not a whole number")
    assert "perNode" in shown and "/policies" not in shown and "pools.yaml" not in shown and ":12" not in shown


def test_url_output_keeps_the_namespaces_pod_security_labels(policy):
    import yaml

    from trainadmit.authoring.webhooks import webhook_configurations

    namespace = yaml.safe_load((ROOT / "deploy" / "base" / "namespace.yaml").read_text())
    [ns] = [d for d in yaml.safe_load_all(webhook_configurations(policy, url="https://127.0.0.1:8443"))
            if d and d["kind"] == "Namespace"]
    assert ns["metadata"]["labels"] == namespace["metadata"]["labels"]


def test_the_deployment_is_system_cluster_critical():
    import yaml

    deployment = yaml.safe_load((ROOT / "deploy" / "base" / "deployment.yaml").read_text())
    assert deployment["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"


def test_the_pod_cidr_is_one_kustomize_setting(tmp_path):
    """deploy/base/pod-network.yaml's podCIDR is what the rendered NetworkPolicy keeps out (and the setting itself is
    not applied)."""
    import shutil

    import yaml

    copy = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", copy)
    setting = copy / "base" / "pod-network.yaml"
    setting.write_text(setting.read_text().replace("10.244.0.0/16", "192.168.0.0/16"))
    out = subprocess.run(["kubectl", "kustomize", str(copy / "overlays" / "default")], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert policy["spec"]["ingress"][0]["from"][0]["ipBlock"]["except"] == ["192.168.0.0/16"]
    assert not [d for d in docs if d["metadata"]["name"] == "trainadmit-pod-network"]
