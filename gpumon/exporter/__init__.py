"""The Prometheus exporter: the latest Snapshot and the hooked jobs as metric families, served over HTTP(S).

SnapshotCollector       collector.py: the prometheus_client Collector over the latest snapshot (+ jobs)
gpu/process/host_families  metrics.py: metric names, units and labels
dcgm_families           dcgm.py: dcgm-exporter's DCGM_FI_* names, units and labels (--dcgm-names)
JobMetrics              jobs.py: hooked jobs found through gpumon.jobs, their step metrics and finding
MetricsServer           server.py: /metrics with optional TLS and basic auth
label_value, short_command, PlacementCache  labels.py: safe label values, container/pod/Slurm placement
PodResourcesWatcher     pod_resources.py: the kubelet's pod-resources API (which container holds which GPU)
PodAttribution, ContainerNames  pods.py: pod/namespace/container labels of GPUs and processes
"""
