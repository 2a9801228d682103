"""How the dashboards look: one colour per team and per pool everywhere, human labels with units.

Colours are assigned from the snapshot's full sorted list of teams (and pools), not from what a page happens
to show, so "vision" is the same colour on every page and under every filter.
"""
from __future__ import annotations

import re

from models.definitions.reasons import CLASSES, UNKNOWN

# A qualitative palette that stays distinct for ~16 series and readable on white (Tableau 20, reordered so
# neighbours differ in hue first).
PALETTE = [
    "#4E79A7", "#F28E2B", "#59A14F", "#E15759", "#76B7B2", "#EDC948", "#B07AA1", "#FF9DA7",
    "#9C755F", "#BAB0AC", "#1F77B4", "#D37295", "#8CD17D", "#B6992D", "#499894", "#86BCB6",
    "#A0CBE8", "#FFBE7D", "#F1CE63", "#D4A6C8",
]
UNMAPPED = "(unmapped)"
UNMAPPED_COLOUR = "#9AA0A6"

# Well-known GPU generations get fixed colours so a pool looks the same at every site.
POOL_COLOURS = {
    "h200": "#3B1F8F", "h100": "#5B3CC4", "gh200": "#2E1A6E", "b200": "#1B1046",
    "a100": "#0F8B8D", "a40": "#5FB3B3", "a10": "#8FD3D1", "l40s": "#C0841A", "l40": "#D9A441",
    "l4": "#E8C77A", "v100": "#B5533C", "t4": "#D98C6F", "rtx": "#8C6D62",
}
POOL_FALLBACK = ["#6C5B7B", "#355C7D", "#C06C84", "#F67280", "#99B898", "#2A363B"]

# Capacity states, as in the Utilization stack (bottom to top).
STATE_COLOURS = {
    "allocated": "#4E79A7",
    "idle": "#C9D6E3",
    "unavailable": "#E15759",
    "active": "#2E7D32",
    "allocated_idle": "#F2A541",
    "no_telemetry": "#BDBDBD",
}

# Pending-reason classes (models/definitions/reasons.py), in their order; no reason recorded is grey.
REASON_COLOURS = {c: UNMAPPED_COLOUR if c == UNKNOWN else PALETTE[i] for i, c in enumerate(CLASSES)}

PRIMARY = "#4E79A7"
GOOD, WARN, BAD = "#2E7D32", "#F2A541", "#C62828"
FONT = "Inter, 'Source Sans 3', 'Segoe UI', Helvetica, Arial, sans-serif"


def team_colours(teams: list[str | None]) -> dict[str, str]:
    """Colour per team name, stable for a given set of teams; NULL team shows as '(unmapped)' in grey."""
    names = sorted({t for t in teams if t and t != UNMAPPED})
    out = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(names)}
    out[UNMAPPED] = UNMAPPED_COLOUR
    return out


def pool_colours(pools: list[str | None]) -> dict[str, str]:
    """Colour per pool (GPU type): fixed for known generations, then a fallback cycle in sorted order."""
    out: dict[str, str] = {}
    rest = []
    for p in sorted({p for p in pools if p}):
        key = p.lower()
        if key in POOL_COLOURS:
            out[p] = POOL_COLOURS[key]
        else:
            rest.append(p)
    for i, p in enumerate(rest):
        out[p] = POOL_FALLBACK[i % len(POOL_FALLBACK)]
    out[UNMAPPED] = UNMAPPED_COLOUR
    return out


# ---------------------------------------------------------------- labels and units

#: Column name -> label shown to people. Units in parentheses, as on every axis.
LABELS: dict[str, str] = {
    "bucket": "Period", "day": "Day", "ts": "Time", "date": "Date", "month": "Month", "period": "Period",
    "cluster": "Cluster", "pool": "Pool (GPU type)", "gpu_type": "Pool (GPU type)", "partition": "Partition",
    "team": "Team", "account": "Slurm account", "user": "User", "qos": "QOS", "cost_center": "Cost centre",
    "node": "Node", "state": "State", "job_id": "Job", "job_uid": "Job key", "size_class": "Request size",
    "source": "Source", "input_name": "Input", "run_id": "Run", "status": "Status", "message": "Message",
    "started_at": "Started (UTC)", "finished_at": "Finished (UTC)", "lines_read": "Lines read",
    "loaded": "Loaded", "skipped": "Skipped", "rejected": "Rejected", "inserted": "New", "updated": "Updated",
    "unchanged": "Unchanged", "line_no": "Line", "field": "Field", "reason": "Reason", "raw": "Input line",
    "lines": "Lines", "first_line_no": "First line", "jobs": "Jobs", "ngpus": "GPUs", "submit": "Submitted (UTC)",
    "start": "Started (UTC)", "end": "Ended (UTC)", "last_ingest": "Last ingest (UTC)", "age": "Age",
    "published_at": "Snapshot published (UTC)", "first_seen": "First job (UTC)", "last_seen": "Last job (UTC)",
}

_SUFFIX_UNITS = [
    (r"_gpu_hours$|_gpu_h$|^gpu_hours$|^gpu_h$", "GPU-hours"),
    (r"_pct$|_percent$|_ratio_pct$", "%"),
    (r"_kwh$", "kWh"),
    (r"_hours$|_h$", "hours"),
    (r"_s$|_seconds$", "s"),
    (r"_gpus$|^gpus$", "GPUs"),
]


def label(col: str, currency: str | None = None) -> str:
    """A human label for a column name; unknown names are humanised and given the unit their suffix implies."""
    if col in LABELS:
        return LABELS[col]
    if currency and re.search(r"(_cost|_amount|_total|_charge|^cost|^amount)$", col):
        unit = currency
    else:
        unit = next((u for pat, u in _SUFFIX_UNITS if re.search(pat, col)), None)
    stem = col
    for pat, _ in _SUFFIX_UNITS:
        stem = re.sub(pat, "", stem)
    words = stem.replace("_", " ").strip() or col.replace("_", " ")
    text = words[:1].upper() + words[1:]
    return f"{text} ({unit})" if unit else text


def plotly_layout(height: int = 380) -> dict:
    """Shared layout: readable at 1400 px, legend on top, no chart junk."""
    return dict(
        height=height,
        # Title at the top of the figure, legend in its own row between title and plot: they never overlap.
        margin=dict(l=10, r=10, t=84, b=10),
        font=dict(family=FONT, size=13, color="#1F2933"),
        title=dict(font=dict(size=15), x=0, xanchor="left", xref="container", y=1, yref="container", yanchor="top",
                   pad=dict(t=12, l=10)),
        legend=dict(orientation="h", yanchor="bottom", y=1.01, xanchor="left", x=0, title_text="",
                    traceorder="normal"),
        hovermode="x unified",
        plot_bgcolor="white",
        paper_bgcolor="white",
        # automargin: room for long tick labels (team names) and the axis title, as the page's width allows
        xaxis=dict(showgrid=False, linecolor="#CBD2D9", ticks="outside", automargin=True),
        yaxis=dict(gridcolor="#EEF1F4", zeroline=False, rangemode="tozero", automargin=True),
    )


# Streamlit theme passed on the command line by `serve` (and mirrored in dashboards/config.toml for AppTest).
STREAMLIT_THEME = {
    "theme.base": "light",
    "theme.primaryColor": PRIMARY,
    "theme.backgroundColor": "#FFFFFF",
    "theme.secondaryBackgroundColor": "#F4F6F8",
    "theme.textColor": "#1F2933",
}
