"""The model outputs each page shows, cached per snapshot version and filter set.

Each function calls the library function of the model that owns the figure (models/*), on a read-only
cursor of the serving snapshot, and returns None while that model has not landed, so a page can say so
instead of inventing numbers. No business SQL lives here: only the mapping from the sidebar's filters to
the model's parameters.
"""
from __future__ import annotations

import polars as pl
import streamlit as st

from dashboards import queries, ui
from dashboards.queries import CACHE


def telemetry_gaps(ctx: "ui.Context") -> pl.DataFrame | None:
    """Nodes and periods without GPU telemetry in the window (issue 3), or None before that model lands."""
    return None
