"""Advisor layer: turns signals into findings and runs remediation experiments. Never imports Textual."""
