"""Efficiency: how busy allocated GPUs really were."""
from __future__ import annotations

from dashboards import ui

ctx = ui.context()
ui.header("Efficiency", "Were allocated GPUs actually busy, and who leaves them idle?", ctx)
ui.not_landed("GPU efficiency", "models.efficiency", 3)
