"""Forecast charts for `gpuledger forecast --plot`: one figure per series (history, forecast, 80 %/95 % bands,
target capacity and the exhaustion date), built with `charts.forecast_band`, written to one self-contained HTML
file (plotly.js embedded, so it opens offline)."""
from __future__ import annotations

from html import escape
from pathlib import Path

import plotly.graph_objects as go
import polars as pl

from dashboards import charts, theme

MAX_SERIES = 24


def forecast_figures(history: pl.DataFrame, forecast: pl.DataFrame, keys: list[str],
                     capacity: pl.DataFrame | None = None, per_hour: float = 1.0, unit: str = "",
                     tail: int | None = None) -> list[tuple[str, go.Figure]]:
    """(label, Figure) per series, at most MAX_SERIES. Values are divided by ``per_hour`` (GPU-hours per
    period → mean GPUs) when capacity is drawn; ``tail`` keeps only that many periods of history."""
    hist_parts = history.partition_by(keys, as_dict=True, maintain_order=True) if keys else {(): history}
    fc_parts = forecast.partition_by(keys, as_dict=True, maintain_order=True) if keys else {(): forecast}
    caps = {}
    if capacity is not None and capacity.height:
        ckeys = [k for k in capacity.columns if k in ("cluster", "pool")]
        caps = {tuple(r[k] for k in ckeys): r for r in capacity.iter_rows(named=True)}
    colours = theme.pool_colours([str(k[-1]) for k in fc_parts] if keys else ["total"])
    out = []
    for kv, fc in list(fc_parts.items())[:MAX_SERIES]:
        label = " / ".join(str(v) for v in kv) or "total"
        cap = caps.get(tuple(kv))
        scale = per_hour if cap is not None else 1.0
        hist = hist_parts.get(kv, history.clear())
        if tail:
            hist = hist.tail(tail)
        cols = ["forecast", "lo80", "hi80", "lo95", "hi95"]
        fc = fc.with_columns(pl.col(c) / scale for c in cols)
        hist = hist.with_columns(pl.col("value") / scale)
        cap_df = None
        if cap is not None and cap.get("target_gpus") is not None:
            xs = [hist["ts"].min() if hist.height else fc["ts"].min(), fc["ts"].max()]
            cap_df = pl.DataFrame({"ts": xs, "target": [cap["target_gpus"]] * 2})
        fig = charts.forecast_band(
            hist, fc, x="ts", y="value", mean="forecast", lo80="lo80", hi80="hi80", lo95="lo95", hi95="hi95",
            colour=colours.get(str(kv[-1]) if kv else "total", theme.PRIMARY),
            y_title="GPUs (mean per period)" if cap is not None else unit, title=label,
            capacity=cap_df, capacity_col="target",
            exhaustion=cap.get("exhausted_upper80") if cap is not None else None)
        out.append((label, fig))
    return out


def write_html(figures: list[tuple[str, go.Figure]], path: str | Path, title: str = "Forecast",
               notes: list[str] | None = None) -> None:
    """One HTML page with every figure; plotly.js is embedded once."""
    parts = [f"<h2>{escape(title)}</h2>"] + [f"<p>{escape(n)}</p>" for n in notes or []]
    for i, (_, fig) in enumerate(figures):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0)))
    Path(path).write_text("<!doctype html><html><head><meta charset='utf-8'><title>" + escape(title) +
                          "</title></head><body style='font-family:sans-serif'>" + "\n".join(parts) +
                          "</body></html>", encoding="utf-8")
