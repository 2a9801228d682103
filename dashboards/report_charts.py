"""The scheduled reports' charts as PNG (matplotlib, Agg: no display, no fetch), in the dashboard's colours
(dashboards/theme.py), for inline ``data:`` images in a self-contained HTML email and its PDF."""
from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402 -- after choosing the headless backend
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402

from dashboards import theme  # noqa: E402

DPI = 110


def _png(fig) -> str:
    """The figure as a ``data:image/png;base64,...`` URI (and closed: the process renders many)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _axes(width: float = 7.0, height: float = 3.2):
    """A figure without a title (the report's heading names the chart)."""
    fig, ax = plt.subplots(figsize=(width, height))
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    return fig, ax


def allocation_png(df: pl.DataFrame, all_pools: list[str]) -> str:
    """Allocation ratio (%) per bucket, one line per pool (``gpu_type``): model_reads.utilization's frame."""
    colours = theme.pool_colours(all_pools)
    fig, ax = _axes()
    ax.set_ylabel("%")
    for (pool,), g in df.sort("bucket").group_by("gpu_type", maintain_order=True):
        ax.plot(g["bucket"].to_list(), (g["allocation_ratio"] * 100).to_list(), marker="o", markersize=3,
                label=str(pool), color=colours.get(pool, theme.PRIMARY))
    ax.set_ylim(0, 105)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%a %d %b"))
    ax.legend(frameon=False, fontsize=8, ncols=4, loc="lower left")
    fig.autofmt_xdate()
    return _png(fig)


def cost_png(lines: pl.DataFrame, all_teams: list[str], currency: str) -> str:
    """Cost per team (horizontal bars, largest on top) from model_reads.month_cost's ``lines``."""
    per = (lines.group_by("team").agg(pl.col("total").cast(pl.Float64).sum()).sort("total"))
    colours = theme.team_colours(all_teams)
    fig, ax = _axes(height=max(2.0, 0.45 * per.height + 1.0))
    ax.set_xlabel(currency)
    teams = [str(t) for t in per["team"].to_list()]
    ax.barh(teams, per["total"].to_list(), color=[colours.get(t, theme.PRIMARY) for t in teams])
    ax.grid(axis="x", color="#e5e5e5", linewidth=0.8)
    ax.grid(axis="y", visible=False)
    for y, v in enumerate(per["total"].to_list()):
        ax.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
    return _png(fig)
