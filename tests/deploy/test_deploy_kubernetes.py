"""deploy/kubernetes: every manifest validated against the Kubernetes schema, and checked against
the doctor it runs (its CLI, its config loader, its footprint figures)."""

from __future__ import annotations

import copy
import fnmatch
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from ascend_doctor.collectors.log_sources import cann_log_root
from ascend_doctor.core.config import Config
from ascend_doctor.core.config_file import load_config

from .test_deploy_systemd import _watch_options

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.30.0"
Doc = dict[str, Any]


def load_docs(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def validate(doc: Doc) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def apply_json6902(doc: Doc, ops: list[Doc]) -> Doc:
    """The RFC 6902 operations kustomize applies (add, replace, remove)."""
    out = copy.deepcopy(doc)
    for op in ops:
        *parents, last = _pointer(op["path"])
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) and last != "-" else last
        if op["op"] == "remove":
            del node[key]
        elif op["op"] == "replace":
            assert key in node if isinstance(node, dict) else True, op["path"]
            node[key] = op["value"]
        elif op["op"] == "add":
            if isinstance(node, list):
                node.insert(len(node) if key == "-" else key, op["value"])
            else:
                node[key] = op["value"]
        else:
            raise AssertionError(f"unsupported op {op['op']}")
    return out


def build(kustomization_dir: Path) -> list[Doc]:
    """What ``kubectl kustomize`` renders, for the features the shipped kustomizations use."""
    k = yaml.safe_load((kustomization_dir / "kustomization.yaml").read_text())
    assert set(k) <= {"apiVersion", "kind", "namespace", "resources", "patches"}, set(k)
    docs: list[Doc] = []
    for res in k["resources"]:
        target = kustomization_dir / res
        docs.extend(build(target) if target.is_dir() else load_docs(target))
    if "namespace" in k:
        for d in docs:
            if d["kind"] != "Namespace":
                d["metadata"]["namespace"] = k["namespace"]
    for patch in k.get("patches", []):
        ops = yaml.safe_load((kustomization_dir / patch["path"]).read_text())
        tgt = patch["target"]
        hits = [
            i
            for i, d in enumerate(docs)
            if d["kind"] == tgt["kind"] and d["metadata"]["name"] == tgt["name"]
        ]
        assert len(hits) == 1, f"patch {patch['path']} matches {len(hits)} resources"
        docs[hits[0]] = apply_json6902(docs[hits[0]], ops)
    return docs


def by_kind(docs: list[Doc], kind: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}s"
    return found[0]


def config_of(configmap: Doc, tmp_path: Path) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(configmap["data"]["config.toml"])
    return load_config(path)  # the real loader: a bad key fails here with file and line


def quantity(text: str) -> float:
    """A Kubernetes quantity as cores or MiB (the units used here)."""
    m = re.fullmatch(r"([\d.]+)(m|Mi|Gi)?", str(text))
    assert m, text
    number, unit = float(m.group(1)), m.group(2)
    return {None: number, "m": number / 1000, "Mi": number, "Gi": number * 1024}[unit]


MANIFESTS = sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")
PATCHES = {p for p in MANIFESTS if "overlays" in p.parts}


@pytest.mark.parametrize("path", [p for p in MANIFESTS if p not in PATCHES], ids=str)
def test_manifest_matches_the_kubernetes_schema(path: Path) -> None:
    docs = load_docs(path)
    assert docs
    for doc in docs:
        validate(doc)


@pytest.mark.parametrize("overlay", ["base", "overlays/device-reset"])
def test_rendered_kustomization_matches_the_schema(overlay: str) -> None:
    docs = build(K8S / overlay)
    assert {d["kind"] for d in docs} == {"Namespace", "ServiceAccount", "ConfigMap", "DaemonSet"}
    for doc in docs:
        validate(doc)


def test_the_validator_rejects_a_broken_manifest() -> None:
    ds = by_kind(build(K8S / "base"), "DaemonSet")
    bad = copy.deepcopy(ds)
    bad["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []  # typo of volumeMounts
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)
    bad = copy.deepcopy(ds)
    bad["spec"]["template"]["spec"]["hostNetwork"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)


def test_kubectl_kustomize_renders_the_same(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed; the Python rendering above is checked instead")
    for overlay in ("base", "overlays/device-reset"):
        proc = subprocess.run(
            [kubectl, "kustomize", str(K8S / overlay)], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        rendered = [d for d in yaml.safe_load_all(proc.stdout) if d]
        key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
        assert sorted(rendered, key=key) == sorted(build(K8S / overlay), key=key)


def _container(ds: Doc) -> Doc:
    containers = ds["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _args(container: Doc) -> dict[str, list[str]]:
    argv = [*container["command"], *container["args"]]
    assert argv[:2] == ["ascend-doctor", "watch"]
    known = _watch_options()
    out: dict[str, list[str]] = {}
    i = 2
    while i < len(argv) and argv[i] != "--":
        assert argv[i] in known, f"{argv[i]} is not an option of `ascend-doctor watch`"
        if known[argv[i]]:
            out.setdefault(argv[i], []).append(argv[i + 1])
            i += 2
        else:
            out.setdefault(argv[i], [])
            i += 1
    return out


def _mounts(ds: Doc) -> dict[str, tuple[Doc, Doc]]:
    """mountPath -> (volumeMount, volume)."""
    spec = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    return {m["mountPath"]: (m, volumes[m["name"]]) for m in _container(ds)["volumeMounts"]}


def _env(container: Doc) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_daemonset_runs_attach_mode_with_real_options() -> None:
    ds = by_kind(build(K8S / "base"), "DaemonSet")
    container = _container(ds)
    if "--attach" not in _watch_options():
        pytest.skip("attach mode (`watch --attach`, issue 5) is not in this build's CLI yet")
    args = _args(container)
    assert "--attach" in args and urlsplit(args["--url"][0]).hostname == "127.0.0.1"
    assert "--" not in container["args"]


def test_daemonset_mounts_what_the_doctor_reads(tmp_path: Path) -> None:
    docs = build(K8S / "base")
    ds, cm = by_kind(docs, "DaemonSet"), by_kind(docs, "ConfigMap")
    container = _container(ds)
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"]["accelerator"] == "huawei-Ascend910"
    assert spec["hostNetwork"] is True and spec["automountServiceAccountToken"] is False
    mounts = _mounts(ds)
    argv = container["args"]
    config_path = Path(argv[argv.index("--config") + 1])
    mount, volume = mounts[str(config_path.parent)]
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    assert config_path.name in cm["data"]
    state = argv[argv.index("--state-dir") + 1]
    assert state in mounts and not mounts[state][0].get("readOnly")
    env = _env(container)
    config = config_of(cm, tmp_path)
    # every file the doctor follows or runs comes from the host, read-only
    needed = [
        str(cann_log_root(env)),
        "/var/log/npu",
        config.collectors.npu_smi.path,
        "/usr/local/Ascend/driver",
        "/usr/local/dcmi",
    ]
    needed += [p for p in argv if p.startswith("/var/log/containers/")]
    needed += list(config.logs.paths)
    for path in needed:
        owners = [m for m in mounts if path == m or path.startswith(m + "/")]
        assert owners, f"{path} is not mounted"
        owner = max(owners, key=len)
        mount, volume = mounts[owner]
        assert "hostPath" in volume and mount.get("readOnly") is True, path
    for path, (mount, volume) in mounts.items():
        if "hostPath" in volume and path != state:
            assert mount.get("readOnly") is True, f"{path} is a writable host path"


def test_base_is_unprivileged_and_cannot_reset(tmp_path: Path) -> None:
    docs = build(K8S / "base")
    sc = _container(by_kind(docs, "DaemonSet"))["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc["readOnlyRootFilesystem"] is True
    config = config_of(by_kind(docs, "ConfigMap"), tmp_path)
    assert config.remediation.allow_device_reset is False
    # unprivileged, npu-smi cannot open the devices: the collector is off, not failing
    assert config.collectors.npu_smi.enabled is False


def test_device_reset_overlay_is_the_only_privileged_variant(tmp_path: Path) -> None:
    docs = build(K8S / "overlays/device-reset")
    ds = by_kind(docs, "DaemonSet")
    assert _container(ds)["securityContext"]["privileged"] is True
    base_ds = by_kind(build(K8S / "base"), "DaemonSet")
    assert ds["metadata"]["name"] == base_ds["metadata"]["name"]  # applied instead of base
    config = config_of(by_kind(docs, "ConfigMap"), tmp_path)
    assert config.remediation.allow_device_reset is True
    assert config.remediation.mode == "auto"
    assert config.collectors.npu_smi.enabled is True
    assert config.collectors.npu_smi.path in _mounts(ds)
    for path in MANIFESTS:
        if path in PATCHES:
            continue
        for doc in load_docs(path):
            text = yaml.safe_dump(doc)
            assert "privileged: true" not in text, f"{path} is privileged"


def test_resources_are_sized_from_the_footprint_benchmark() -> None:
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"([\d.]+) MiB RSS, ([\d.]+)% of a core \(\d runs: [\d.]+-([\d.]+)%", readme)
    assert m, "README's footprint figures moved: update this test and the DaemonSet"
    rss_mib, worst_cpu = float(m.group(1)), float(m.group(3)) / 100
    res = _container(by_kind(build(K8S / "base"), "DaemonSet"))["resources"]
    req, lim = res["requests"], res["limits"]
    assert rss_mib <= quantity(req["memory"]) <= 2 * rss_mib
    assert worst_cpu <= quantity(req["cpu"]) <= 4 * worst_cpu
    assert quantity(lim["memory"]) >= 2 * quantity(req["memory"])
    assert quantity(lim["cpu"]) >= 2 * quantity(req["cpu"])


def test_vllm_example_writes_where_the_daemonset_reads() -> None:
    ds = by_kind(build(K8S / "base"), "DaemonSet")
    deploy = by_kind(load_docs(K8S / "examples" / "vllm-ascend-attach.yaml"), "Deployment")
    vllm = deploy["spec"]["template"]["spec"]["containers"][0]
    doctor = _container(ds)
    assert cann_log_root(_env(vllm)) == cann_log_root(_env(doctor))
    root = str(cann_log_root(_env(vllm)))
    vllm_volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
    vllm_mount = next(m for m in vllm["volumeMounts"] if m["mountPath"] == root)
    host = vllm_volumes[vllm_mount["name"]]["hostPath"]["path"]
    assert _mounts(ds)[root][1]["hostPath"]["path"] == host
    # the kubelet names container logs <pod>_<namespace>_<container>-<id>.log
    log_glob = doctor["args"][doctor["args"].index("--log") + 1]
    name = f"/var/log/containers/vllm-qwen-7d9f_serving_{vllm['name']}-0a1b2c.log"
    assert fnmatch.fnmatch(name, log_glob)
    # the doctor probes the server on the node's loopback
    assert deploy["spec"]["template"]["spec"]["hostNetwork"] is True
    url = doctor["args"][doctor["args"].index("--url") + 1]
    assert vllm["args"][vllm["args"].index("--port") + 1] == str(urlsplit(url).port)


def test_supervised_example_wraps_vllm_serve(tmp_path: Path) -> None:
    docs = load_docs(K8S / "examples" / "vllm-ascend-supervised.yaml")
    deploy, cm = by_kind(docs, "Deployment"), by_kind(docs, "ConfigMap")
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    args = _args(container)
    argv = container["args"]
    assert argv[argv.index("--") + 1 : argv.index("--") + 3] == ["vllm", "serve"]
    config = config_of(cm, tmp_path)
    assert config.remediation.mode == "auto"
    assert "livenessProbe" not in container  # a liveness kill would undo the doctor's fix
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert args["--state-dir"][0] in mounts
    assert str(Path(args["--config"][0]).parent) in mounts
