"""Figures of the placement protocol's curves: plain functions curves -> plotly Figure, plus writers.

The dashboards draw from the same builders; docs/ figures are written with ``write_placement_png``
(plotly static export through kaleido and Debian's chromium, an optional dependency in the ``bench`` extra).
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

COLORS = {"Random": "#7f7f7f", "DotProd": "#bcbd22", "GpuClustering": "#17becf", "GpuPacking": "#9467bd",
          "BestFit": "#1f77b4", "FGD": "#d62728"}


def placement_figure(curves_by_trace: dict[str, pl.DataFrame], metric: str = "alloc_pct"):
    """One panel per trace: mean over seeds of ``metric`` (alloc_pct or frag_rate_pct) against arrived
    GPU demand (% of capacity), one line per policy."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    names = list(curves_by_trace)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names, shared_yaxes=True)
    for i, name in enumerate(names, start=1):
        mean = curves_by_trace[name].group_by("policy", "arrived_pct").agg(pl.col(metric).mean()) \
            .sort("policy", "arrived_pct")
        for pol in [p for p in COLORS if p in set(mean["policy"].to_list())]:
            d = mean.filter(pl.col("policy") == pol)
            fig.add_trace(go.Scatter(x=d["arrived_pct"].to_list(), y=d[metric].to_list(), name=pol,
                                     legendgroup=pol, showlegend=i == 1, line={"color": COLORS[pol], "width": 1.6}),
                          row=1, col=i)
        fig.update_xaxes(title_text="arrived GPU demand (% of capacity)", row=1, col=i)
    label = {"alloc_pct": "GPU allocation ratio (%)", "frag_rate_pct": "fragmentation rate (%)"}[metric]
    fig.update_yaxes(title_text=label, row=1, col=1)
    fig.update_layout(height=380, width=330 * len(names) + 120, margin={"l": 60, "r": 20, "t": 40, "b": 50},
                      template="plotly_white", legend={"orientation": "h", "y": -0.25})
    return fig


def write_placement_html(curves_by_trace: dict[str, pl.DataFrame], path: str | Path) -> None:
    figs = [placement_figure(curves_by_trace, m) for m in ("alloc_pct", "frag_rate_pct")]
    html = "".join(f.to_html(full_html=False, include_plotlyjs="cdn" if i == 0 else False)
                   for i, f in enumerate(figs))
    Path(path).write_text(f"<html><body>{html}</body></html>", encoding="utf-8")


def write_placement_png(curves_by_trace: dict[str, pl.DataFrame], path: str | Path,
                        metric: str = "alloc_pct") -> None:
    placement_figure(curves_by_trace, metric).write_image(str(path), scale=1.5)
