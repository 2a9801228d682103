"""Fragmentation: why jobs wait while GPUs are free."""
from __future__ import annotations

from dashboards import ui

ctx = ui.context()
ui.header("Fragmentation", "Why do jobs wait while GPUs sit free?", ctx)
ui.not_landed("Fragmentation", "models.fragmentation", 5)
