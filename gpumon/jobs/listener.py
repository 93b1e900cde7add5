"""Listener: how a followed job (a hook client, py-spy's sampler, an attached job) says that something changed."""

from __future__ import annotations

from collections.abc import Callable

Listener = Callable[[str], None]
"""Called on the source's thread with what changed ('hello', 'steps', 'state', 'estimate', 'ended', ...)."""
