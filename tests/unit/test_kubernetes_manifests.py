"""deploy/kubernetes/: the manifests parse, every object has what its kind requires, and the parts agree.

No Kubernetes API server runs here, and kubectl's client-side dry run needs one (discovery and the
OpenAPI schema: `kubectl create --dry-run=client` fails offline), so the required fields are checked
here per kind, from the Kubernetes API reference (apps/v1 DaemonSet, Deployment, StatefulSet; v1 Service,
ConfigMap, Secret, ServiceAccount, Namespace; rbac.authorization.k8s.io/v1; policy/v1). The containers'
args (with the ConfigMap's TOML files) go through the real `leveller` argument parsers, and the agent's
capabilities are the systemd unit's.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from leveller import config
from leveller.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "deploy" / "kubernetes"
API = {  # kind -> apiVersion (the stable group/version of each)
    "Namespace": "v1", "ServiceAccount": "v1", "ConfigMap": "v1", "Secret": "v1", "Service": "v1",
    "DaemonSet": "apps/v1", "Deployment": "apps/v1", "StatefulSet": "apps/v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1", "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "Role": "rbac.authorization.k8s.io/v1", "RoleBinding": "rbac.authorization.k8s.io/v1",
    "PodDisruptionBudget": "policy/v1",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
# A tuple, not a set: the parametrization order must not follow the hash seed (xdist workers compare it).
WORKLOADS = ("DaemonSet", "Deployment", "StatefulSet")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
CAPABILITY = re.compile(r"[A-Z_]+")
SAMPLE_ENV = {"NODE_NAME": "node-a", "NODE_IP": "10.1.2.3", "POD_NAME": "leveller-controller-0"}


def manifests() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict), f"{path.name}: a document that is not a mapping"
            out.append((path.name, doc))
    return out


OBJECTS = manifests()
BY_KIND: dict[str, dict[str, dict[str, Any]]] = {}
for _, _obj in OBJECTS:
    BY_KIND.setdefault(_obj["kind"], {})[_obj["metadata"]["name"]] = _obj


def ids(objs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [f"{f}:{o['kind']}/{o['metadata']['name']}" for f, o in objs]


def test_the_directory_holds_every_part_and_kustomization_lists_every_file() -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for _, o in OBJECTS}
    for want in [("DaemonSet", "leveller-agent"), ("StatefulSet", "leveller-controller"),
                 ("Deployment", "leveller-sdn"), ("ConfigMap", "leveller-config"),
                 ("ServiceAccount", "leveller-agent"), ("ClusterRole", "leveller-agent"),
                 ("Secret", "leveller-agent-tls"), ("Secret", "leveller-controller-tls")]:
        assert want in kinds
    kustomization = yaml.safe_load((DIR / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(p.name for p in DIR.glob("*.yaml")
                                                        if p.name != "kustomization.yaml")
    assert len(kinds) == len(OBJECTS), "two objects of one kind share a name"


@pytest.mark.parametrize(("name", "obj"), OBJECTS, ids=ids(OBJECTS))
def test_every_object_has_the_fields_its_kind_requires(name: str, obj: dict[str, Any]) -> None:
    kind = obj.get("kind")
    assert kind in API, f"{name}: kind {kind!r} not among the checked kinds"
    assert obj.get("apiVersion") == API[kind]
    meta = obj["metadata"]
    assert DNS_SUBDOMAIN.fullmatch(meta["name"]) and len(meta["name"]) <= 253
    if kind in CLUSTER_SCOPED:
        assert "namespace" not in meta
    else:
        assert meta.get("namespace") == "leveller"
    CHECKS.get(kind, lambda o: None)(obj)


def _labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _check_pod_spec(spec: dict[str, Any]) -> None:
    containers = spec["containers"]
    assert containers, "a pod needs at least one container"
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    assert len(volumes) == len(spec.get("volumes", [])), "volume names repeat"
    for v in volumes.values():
        if "configMap" in v:
            assert v["configMap"]["name"] in BY_KIND["ConfigMap"]
        if "secret" in v:
            assert v["secret"]["secretName"] in BY_KIND["Secret"]
        if "hostPath" in v:
            assert v["hostPath"]["path"].startswith("/")
    if "serviceAccountName" in spec:
        assert spec["serviceAccountName"] in BY_KIND["ServiceAccount"]
    names = [c["name"] for c in containers]
    assert len(set(names)) == len(names)
    for c in containers:
        assert DNS_LABEL.fullmatch(c["name"])
        assert c["image"], f"container {c['name']}: image required"
        env = {e["name"] for e in c.get("env", [])}
        for arg in c.get("command", []) + c.get("args", []):
            for var in re.findall(r"\$\((\w+)\)", arg):
                assert var in env, f"container {c['name']}: $({var}) in {arg!r} has no env entry"
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes, f"container {c['name']}: mount of undeclared volume {m['name']!r}"
            assert m["mountPath"].startswith("/")
        for p in c.get("ports", []):
            assert 0 < p["containerPort"] < 65536
        limits, requests = c["resources"]["limits"], c["resources"]["requests"]
        assert {"cpu", "memory"} <= set(limits) and {"cpu", "memory"} <= set(requests)
        probe = c.get("livenessProbe")
        assert probe is not None, f"container {c['name']}: no liveness probe"
        assert sum(k in probe for k in ("httpGet", "tcpSocket", "grpc", "exec")) == 1
        port = next(probe[k]["port"] for k in ("httpGet", "tcpSocket", "grpc") if k in probe)
        assert port in {p["containerPort"] for p in c.get("ports", [])}
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc.get("privileged", False) is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        for cap in sc["capabilities"].get("add", []):
            assert CAPABILITY.fullmatch(cap) and not cap.startswith("CAP_")


def _check_workload(obj: dict[str, Any]) -> None:
    spec = obj["spec"]
    template = spec["template"]
    assert _labels_match(spec["selector"]["matchLabels"], template["metadata"]["labels"]), \
        "spec.selector must match the template's labels"
    if obj["kind"] != "DaemonSet":
        assert isinstance(spec["replicas"], int) and spec["replicas"] >= 1
    if obj["kind"] == "StatefulSet":
        service = BY_KIND["Service"][spec["serviceName"]]
        assert service["spec"]["clusterIP"] == "None", "a StatefulSet's serviceName is a headless Service"
    _check_pod_spec(template["spec"])


def _check_service(obj: dict[str, Any]) -> None:
    ports = obj["spec"]["ports"]
    assert ports and all(0 < p["port"] < 65536 and DNS_LABEL.fullmatch(p["name"]) for p in ports)
    targets = [w for kind in WORKLOADS for w in BY_KIND.get(kind, {}).values()
               if _labels_match(obj["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])]
    assert len(targets) == 1, "a Service selects exactly one workload's pods"
    exposed = {p["containerPort"] for c in targets[0]["spec"]["template"]["spec"]["containers"]
               for p in c.get("ports", [])}
    assert {p["targetPort"] for p in ports} <= exposed


def _check_binding(obj: dict[str, Any]) -> None:
    ref = obj["roleRef"]
    assert ref["apiGroup"] == "rbac.authorization.k8s.io" and ref["name"] in BY_KIND[ref["kind"]]
    for s in obj["subjects"]:
        assert s["kind"] == "ServiceAccount" and s["name"] in BY_KIND["ServiceAccount"]


def _check_role(obj: dict[str, Any]) -> None:
    for rule in obj["rules"]:
        assert rule["verbs"] and "*" not in rule["verbs"] and "*" not in rule["resources"]


def _check_pdb(obj: dict[str, Any]) -> None:
    sel = obj["spec"]["selector"]["matchLabels"]
    assert any(_labels_match(sel, w["spec"]["template"]["metadata"]["labels"])
               for kind in WORKLOADS for w in BY_KIND.get(kind, {}).values())


def _check_data(obj: dict[str, Any]) -> None:
    assert isinstance(obj.get("data", {}), dict)
    for key in obj.get("data", {}):
        assert re.fullmatch(r"[-._a-zA-Z0-9]+", key)


CHECKS = {"DaemonSet": _check_workload, "Deployment": _check_workload, "StatefulSet": _check_workload,
          "Service": _check_service, "ClusterRoleBinding": _check_binding, "RoleBinding": _check_binding,
          "ClusterRole": _check_role, "Role": _check_role, "PodDisruptionBudget": _check_pdb,
          "ConfigMap": _check_data, "Secret": _check_data}


def containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [(w["metadata"]["name"], w, c) for kind in WORKLOADS for w in BY_KIND.get(kind, {}).values()
            for c in w["spec"]["template"]["spec"]["containers"]]


def parse(container: dict[str, Any], tmp_path: Path) -> tuple[str, argparse.Namespace]:
    """The container's command line through the real parser, its --config from the ConfigMap applied."""
    assert container["command"] == ["leveller"]
    argv = [re.sub(r"\$\((\w+)\)", lambda m: SAMPLE_ENV[m.group(1)], a) for a in container["args"]]
    data = BY_KIND["ConfigMap"]["leveller-config"]["data"]
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            key = Path(arg.split("=", 1)[1]).name
            (tmp_path / key).write_text(data[key])
            argv[i] = f"--config={tmp_path / key}"
    parser = build_parser()
    args = parser.parse_args(argv)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return args.command, config.apply(args, sub.choices[args.command], argv[1:], args.command)


@pytest.mark.parametrize(("name", "workload", "container"), containers(), ids=[c[0] for c in containers()])
def test_the_containers_args_and_config_are_accepted_by_the_real_parsers(name: str, workload: dict[str, Any],
                                                                        container: dict[str, Any],
                                                                        tmp_path: Path) -> None:
    command, args = parse(container, tmp_path)
    ports = {p["containerPort"] for p in container["ports"]}
    if command == "agent":
        from leveller.agent import arrivals

        arrivals.check(args)
        assert arrivals.wanted(args) and args.kube_pods == "https://10.1.2.3:10250/pods"
        assert args.host == "node-a" and args.tls_cert.endswith("/node-a.pem") and args.tls_ca
        assert args.metrics_port in ports and args.metrics_addr == "10.1.2.3"
        assert container["livenessProbe"]["httpGet"]["port"] == args.metrics_port
        assert len(args.controller.split(",")) == BY_KIND["StatefulSet"]["leveller-controller"]["spec"]["replicas"]
    elif command == "controller":
        assert args.etcd and args.advertise == "leveller-controller-0.leveller-controller.leveller.svc:50051"
        assert args.advertise.split(",")[0] in BY_KIND["ConfigMap"]["leveller-config"]["data"]["agent.toml"]
        assert int(args.listen.rsplit(":", 1)[1]) in ports and args.tls_cert and args.tls_ca
        assert workload["spec"]["replicas"] == 2
    else:
        assert command == "sdn"
        assert int(args.api.rsplit(":", 1)[1]) in ports and args.of_port in ports and args.api_token_file


def test_the_agent_has_the_systemd_units_capabilities_and_not_privileged() -> None:
    unit = (ROOT / "deploy" / "systemd" / "leveller-agent.service").read_text()
    bounding = re.search(r"^CapabilityBoundingSet=(.*)$", unit, re.M)
    assert bounding is not None
    want = sorted(c.removeprefix("CAP_") for c in bounding.group(1).split())
    agent = BY_KIND["DaemonSet"]["leveller-agent"]["spec"]["template"]["spec"]
    (container,) = agent["containers"]
    assert sorted(container["securityContext"]["capabilities"]["add"]) == want
    assert agent["hostNetwork"] is True and agent["hostPID"] is True
    assert {t.get("operator") for t in agent["tolerations"]} == {"Exists"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in agent["volumes"] if "hostPath" in v}
    assert host[mounts["/sys/fs/bpf"]["name"]] == "/sys/fs/bpf"
    assert host[mounts["/run/leveller"]["name"]] == "/run/leveller"
    cgroup = next(m for m in container["volumeMounts"] if host.get(m["name"]) == "/sys/fs/cgroup")
    assert cgroup["readOnly"] is True
    assert f"--kube-cgroup-root={cgroup['mountPath']}" in container["args"]


def test_only_the_agent_may_call_the_kubernetes_api_and_only_to_read_its_kubelet() -> None:
    accounts = BY_KIND["ServiceAccount"]
    assert accounts["leveller-controller"]["automountServiceAccountToken"] is False
    assert accounts["leveller-sdn"]["automountServiceAccountToken"] is False
    bound = [(b["roleRef"]["name"], s["name"]) for kind in ("ClusterRoleBinding", "RoleBinding")
             for b in BY_KIND.get(kind, {}).values() for s in b["subjects"]]
    assert bound == [("leveller-agent", "leveller-agent")]
    assert BY_KIND["ClusterRole"]["leveller-agent"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]


def test_the_image_is_the_documented_placeholder() -> None:
    images = {c["image"] for _, _, c in containers()}
    assert images == {"leveller:VERSION"}
    assert "leveller:VERSION" in (ROOT / "docs" / "operations.md").read_text()
