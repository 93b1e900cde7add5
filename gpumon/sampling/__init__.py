"""Sampling layer: NVML, host and process collectors, snapshots, history, recording. Never imports Textual."""
