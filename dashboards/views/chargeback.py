"""Chargeback: what each team and cost centre owes for a period."""
from __future__ import annotations

from dashboards import ui

ctx = ui.context()
ui.header("Chargeback", "What did each team cost, and does it add up to what the cluster cost?", ctx)
ui.not_landed("Chargeback", "models.chargeback", 6)
