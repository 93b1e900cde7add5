"""Attach layer: finds hooked jobs, connects to their sockets, and falls back to py-spy for jobs without the hook."""
