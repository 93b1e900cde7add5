"""The deployment files against the exporter: the Grafana dashboard's and the alert rules' metric and label names
are ones the exporter exports, their PromQL parses (promtool), the alerts fire when they should (promtool test
rules), and the systemd unit runs a command line gpumon accepts (the Kubernetes files: test_kubernetes_deploy.py)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from exporter_helpers import REPO, samples
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from gpumon.advisor.rules import Finding
from gpumon.advisor.signals import Signals
from gpumon.cli import build_parser
from gpumon.cli.exporter import DEFAULT_LISTEN, DEFAULT_PORT
from gpumon.exporter.collector import SnapshotCollector
from gpumon.exporter.jobs import JobMetrics, RankFigures
from gpumon.exporter.labels import PlacementCache
from gpumon.sampling.snapshot import GpuSample, MigSample, ProcessSample, Snapshot, XidEvent

DASHBOARD = REPO / "assets" / "grafana" / "gpumon.json"
DEPLOY = REPO / "docs" / "deploy"
ALERTS = DEPLOY / "alerts.yml"
METRIC = re.compile(r"\bgpumon_[a-z_]+\b")
MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*\"")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
GRAFANA_VARIABLES = {"$host": ".*", "$__rate_interval": "5m"}


def _everything_snapshot() -> Snapshot:
    """A snapshot with every field set, so every family has a series."""
    gpu = GpuSample(
        index=0,
        uuid="GPU-a",
        name="H100",
        utilization_gpu=50.0,
        utilization_memory=20.0,
        memory_used=1,
        memory_total=2,
        temperature=40.0,
        power=300.0,
        power_limit=700.0,
        power_limit_default=700.0,
        clock_sm=1980,
        clock_memory=2619,
        throttle_reasons=(),
        pcie_rx=1.0,
        pcie_tx=1.0,
        sm_activity=30.0,
        sm_occupancy=20.0,
        tensor_activity=5.0,
        dram_bandwidth=10.0,
        clock_sm_max=1980,
        fan_speed=30.0,
        pcie_link_gen=5,
        pcie_link_width=16,
        pcie_link_gen_max=5,
        pcie_link_width_max=16,
        energy_total=1.0,
        nvlink_rx=1.0,
        nvlink_tx=1.0,
        ecc_corrected_volatile=0,
        ecc_uncorrected_volatile=0,
        ecc_corrected_aggregate=0,
        ecc_uncorrected_aggregate=0,
        remapped_rows_correctable=0,
        remapped_rows_uncorrectable=0,
        remapped_rows_pending=False,
        remapped_rows_failed=False,
        retired_pages=0,
        retired_pages_pending=False,
        mig_mode=True,
        mig_instances=(MigSample(index=0, memory_used=1),),
        xid_events=(XidEvent(timestamp=1.0, xid=79),),
    )
    process = ProcessSample(
        pid=1,
        command="python train.py",
        gpu_indices=(0,),
        gpu_memory=1,
        sm_percent=1.0,
        cpu_percent=1.0,
        rss=1,
        children=(ProcessSample(pid=2, cpu_percent=1.0, rss=1),),
    )
    return Snapshot(timestamp=2.0, gpus=(gpu,), processes=(process,))


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Every sample name the exporter can export -> its label names."""
    jobs = JobMetrics()
    signals = Signals.of(
        step_ms=100.0,
        data_share=0.5,
        gpu_share=0.4,
        steps_per_s=10.0,
        samples_per_s=80.0,
        syncs_per_step=1.0,
        num_workers=2,
        peak_memory=1,
        step_shares={"gpu_busy": 0.4, "data": 0.5, "other": 0.1},
    )
    jobs.figures = (
        RankFigures(
            labels=("1", "train.py", "run:r", "r", "0", "0", "2", "", "", "", "", "", ""),
            signals=signals,
            syncs_per_step=1.0,
            peak_memory=1.0,
            steps_total=5,
            finding=Finding(category="input_bound", evidence="", confidence=0.9, severity=0.5),
        ),
    )
    collector = SnapshotCollector("h", placements=PlacementCache(enabled=False), extra=jobs)
    collector.on_snapshot(_everything_snapshot())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    found = samples(generate_latest(registry).decode())
    names = {name: set().union(*(labels.keys() for labels, _ in rows)) for name, rows in found.items()}
    return names


def test_no_series_has_a_label_prometheus_sets_itself(exported: dict[str, set[str]]) -> None:
    """`job` and `instance` are Prometheus' own target labels: an exporter's would be stored renamed
    (exported_job), and queries grouping by `job` would merge every training job into the scrape job."""
    for name, labels in exported.items():
        assert not labels & {"job", "instance"}, (name, labels)


def _dashboard_targets(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    targets: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        targets.extend(panel.get("targets", []))
        for inner in panel.get("panels", []):
            targets.extend(inner.get("targets", []))
    return targets


def _labels_of(expression: str, exported: dict[str, set[str]]) -> set[str]:
    names = METRIC.findall(expression)
    assert names, expression
    for name in names:
        assert name in exported, f"{name} (in {expression!r}) is not a metric the exporter exports"
    return set().union(*(exported[name] for name in names))


def test_dashboard_is_importable_and_queries_exported_names(exported: dict[str, set[str]]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"] and isinstance(dashboard["schemaVersion"], int)
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    targets = _dashboard_targets(dashboard)
    assert len(targets) >= 15
    for target in targets:
        expression = target["expr"]
        labels = _labels_of(expression, exported) | {"host"}
        for label in MATCHER.findall(expression):
            assert label in labels, f"label {label!r} of {expression!r} is not exported"
        for grouping in GROUPING.findall(expression):
            for label in grouping.split(","):
                assert label.strip() in labels, f"grouping label {label!r} of {expression!r} is not exported"
        for label in LEGEND_LABEL.findall(target.get("legendFormat", "")):
            assert label in labels, f"legend label {label!r} of {expression!r} is not exported"
    variables = dashboard["templating"]["list"]
    host_query = next(v for v in variables if v["name"] == "host")["query"]["query"]
    assert _labels_of(host_query, exported) >= {"host"}
    for family in (
        "gpumon_gpu_utilization_ratio",
        "gpumon_gpu_sm_active_ratio",
        "gpumon_job_data_wait_ratio",
        "gpumon_job_finding",
        "gpumon_process_gpu_memory_bytes",
    ):
        assert any(family in target["expr"] for target in targets), family


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("no promtool (the Debian package `prometheus`; .ci/run installs it where it can)")
    return found


def _promtool_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_dashboard_promql_parses(tmp_path: Path) -> None:
    _promtool()
    expressions = [target["expr"] for target in _dashboard_targets(json.loads(DASHBOARD.read_text()))]
    rules = {"groups": [{"name": "dashboard", "rules": []}]}
    for number, expression in enumerate(expressions):
        for variable, value in GRAFANA_VARIABLES.items():
            expression = expression.replace(variable, value)
        rules["groups"][0]["rules"].append({"record": f"dashboard:query_{number}", "expr": expression})
    (tmp_path / "dashboard.yml").write_text(json.dumps(rules))  # JSON is YAML
    result = _promtool_run("check", "rules", "dashboard.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_name_exported_metrics(exported: dict[str, set[str]]) -> None:
    text = ALERTS.read_text()
    assert tuple(re.findall(r"^\s*- alert:\s*(\w+)$", text, flags=re.MULTILINE)) == ALERT_NAMES
    expressions = re.findall(r"^\s*expr:\s*(.+)$", text, flags=re.MULTILINE)
    assert len(expressions) == len(ALERT_NAMES)
    for expression in expressions:
        if expression.startswith("up{"):  # Prometheus' own series for the scrape
            assert expression == 'up{job="gpumon"} == 0'
            continue
        labels = _labels_of(expression, exported)
        for label in MATCHER.findall(expression):
            assert label in labels, (label, expression)
    for label in re.findall(r"\$labels\.(\w+)", text):
        assert label in {"instance"} or any(label in names for names in exported.values()), label


def test_every_alert_is_tested_firing_and_quiet() -> None:
    tests = ALERT_TESTS.read_text()
    for name in ALERT_NAMES:
        cases = re.findall(rf"alertname: {name}\n\s+exp_alerts:(.*)", tests)
        assert "[]" in [case.strip() for case in cases], f"{name}: no case where it must stay quiet"
        assert "" in [case.strip() for case in cases], f"{name}: no case where it must fire"


ALERT_TESTS = Path(__file__).with_name("alert_rules_test.yml")
ALERT_NAMES = (
    "GpumonExporterDown",
    "GpumonNvmlDown",
    "GpumonGpuXidError",
    "GpumonGpuUncorrectableEcc",
    "GpumonGpuRowRemapPending",
    "GpumonGpuRowRemapFailed",
    "GpumonGpuThermalThrottle",
    "GpumonJobNoSteps",
    "GpumonJobDataWait",
    "GpumonJobInputBound",
)


def test_alert_tests_read_the_shipped_alerts_from_their_own_folder() -> None:
    (rule_file,) = yaml_rule_files(ALERT_TESTS)
    assert (ALERT_TESTS.parent / rule_file).resolve() == ALERTS.resolve()


def yaml_rule_files(path: Path) -> list[str]:
    """The rule_files line of a promtool test file (one flow list: the file is read without a YAML parser)."""
    match = re.search(r"^rule_files:\s*\[([^\]]*)\]", path.read_text(), flags=re.MULTILINE)
    assert match is not None, f"{path.name}: no rule_files: [...] line"
    return [name.strip() for name in match.group(1).split(",")]


def test_alert_rules_check_and_fire_when_they_should() -> None:
    _promtool()
    checked = _promtool_run("check", "rules", str(ALERTS), cwd=ALERTS.parent)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = _promtool_run("test", "rules", ALERT_TESTS.name, cwd=ALERT_TESTS.parent)  # as a maintainer runs it
    assert tested.returncode == 0, tested.stdout + tested.stderr


def _gpumon_arguments(command_line: str) -> list[str]:
    words = shlex.split(command_line)
    return words[words.index("exporter") :]


def test_systemd_unit_runs_an_accepted_command(tmp_path: Path) -> None:
    unit = (DEPLOY / "gpumon-exporter.service").read_text()
    exec_start = re.search(r"^ExecStart=(.+)$", unit, flags=re.MULTILINE)
    assert exec_start is not None
    args = build_parser().parse_args(_gpumon_arguments(exec_start.group(1)))
    assert args.listen == DEFAULT_LISTEN
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return
    gpumon = shutil.which("gpumon")
    if gpumon is None:
        return
    local = tmp_path / "gpumon-exporter.service"
    local.write_text(unit.replace(exec_start.group(1).split()[0], gpumon))
    verified = subprocess.run([analyze, "verify", str(local)], capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0 and "gpumon-exporter.service" not in verified.stderr, verified.stderr


def test_systemd_unit_names_a_remote_drop_in_with_tls_and_basic_auth() -> None:
    """The unit's commented drop-in serves every address only with TLS and basic auth, on the default port."""
    unit = (DEPLOY / "gpumon-exporter.service").read_text()
    drop_in = [line.removeprefix("# remote: ") for line in unit.splitlines() if line.startswith("# remote: ")]
    assert drop_in[:2] == ["[Service]", "ExecStart="]  # the empty ExecStart= clears the unit's own
    args = build_parser().parse_args(_gpumon_arguments(drop_in[2].removeprefix("ExecStart=")))
    assert args.listen == f":{DEFAULT_PORT}"
    assert args.tls_cert and args.tls_key and args.basic_auth_file


def test_fleet_view_queries_exported_metrics_and_labels(exported: dict[str, set[str]]) -> None:
    """`gpumon fleet` reads these series and labels: each one is something the exporter exports."""
    from gpumon.fleet.processes import PROCESS_QUERIES
    from gpumon.fleet.snapshot import FINDING_QUERY, GPU_QUERIES, HISTORY_QUERIES, JOB_QUERIES

    wanted = {
        **{name: {"host", "gpu"} for name in (*GPU_QUERIES.values(), *HISTORY_QUERIES.values())},
        **{name: {"host", "pid", "command", "run_id", "rank"} for name in JOB_QUERIES.values()},
        FINDING_QUERY: {"host", "pid", "run_id", "category"},
        **{name: {"host", "pid", "gpu", "command"} for name in PROCESS_QUERIES.values()},
    }
    for expression, labels in wanted.items():
        for name in re.findall(r"gpumon_[a-z_]+", expression):
            assert name in exported, f"{name} (read by gpumon fleet) is not a metric the exporter exports"
            assert labels <= exported[name], f"{name} lacks {labels - exported[name]}"
