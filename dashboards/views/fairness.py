"""Fairness & queues: is the cluster shared as agreed?"""
from __future__ import annotations

from dashboards import ui

ctx = ui.context()
ui.header("Fairness & queues", "Does each team get its share, and who waits too long?", ctx)
ui.not_landed("Fairness", "models.fairness", 6)
