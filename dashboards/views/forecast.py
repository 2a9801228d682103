"""Forecast & capacity: when demand outgrows capacity, and what more GPUs would buy."""
from __future__ import annotations

from dashboards import ui

ctx = ui.context()
ui.header("Forecast & capacity", "When do we need more GPUs, and what would adding them change?", ctx)
ui.not_landed("Forecasting", "models.forecast", 7)
