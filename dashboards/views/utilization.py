"""Utilization: where the GPU-hours went."""
from __future__ import annotations

from dashboards import ui

ctx = ui.context()
ui.header("Utilization", "How much of the capacity we own was allocated, idle or unavailable?", ctx)
ui.not_landed("Utilization", "models.utilization", 5)
