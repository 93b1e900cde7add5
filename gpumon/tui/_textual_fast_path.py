"""Kept for the modules that import drawn_text from here (gpu_pane, graph, gauge_graph): gpumon.tui._textual_compat."""

from gpumon.tui._textual_compat import drawn_text

__all__ = ["drawn_text"]
