"""The sidebar every page shares: the global filters and the data's freshness."""
from __future__ import annotations

import datetime as dt

import streamlit as st

from dashboards import queries, ui
from dashboards.filters import Filters, default_window

PRESETS = {"7 days": 7, "30 days": 30, "90 days": 90, "1 year": 365, "All": None}
_DATES = "f_dates"
#: What the sidebar says when the first day of the range is after the last (nothing is computed then).
REVERSED = "Date range reversed"


def _apply_preset(cat: queries.Catalogue) -> None:
    choice = st.session_state.get("f_preset")
    if not choice or cat.last_day is None:
        return
    n = PRESETS[choice]
    start = cat.first_day if n is None else max(cat.first_day, cat.last_day - dt.timedelta(days=n - 1))
    st.session_state[_DATES] = (start, cat.last_day)


def _clear_preset() -> None:
    st.session_state["f_preset"] = None


def filters(cat: queries.Catalogue) -> Filters | None:
    """Render the filter widgets (their state survives page switches) and return the chosen Filters; None when
    the date range is reversed (the sidebar says so and no page computes anything for it)."""
    sb = st.sidebar
    sb.markdown("### Filters")
    first, last = cat.first_day, cat.last_day
    if _DATES not in st.session_state:
        st.session_state[_DATES] = default_window(first, last)
    sb.pills("Window", list(PRESETS), key="f_preset", on_change=_apply_preset, args=(cat,),
             label_visibility="collapsed")
    lo, hi = st.session_state[_DATES] if len(st.session_state[_DATES]) == 2 else (st.session_state[_DATES][0],) * 2
    if first and last:
        # A snapshot that moved (new data, or a different warehouse) must not leave the range outside the data.
        # The order is kept as given: a reversed range is refused below, never silently turned into another one.
        lo, hi = min(max(lo, first), last), min(max(hi, first), last)
        st.session_state[_DATES] = (lo, hi)
    picked = sb.date_input("Dates (UTC)", key=_DATES, min_value=first, max_value=last, format="YYYY-MM-DD",
                           on_change=_clear_preset,
                           help="Inclusive of both days; every figure covers [first day 00:00, last day 24:00) UTC.")
    start, end_incl = (picked[0], picked[1]) if len(picked) == 2 else (picked[0], picked[0])
    if end_incl < start:
        sb.error(f"{REVERSED}: the first day ({start:%Y-%m-%d}) is after the last ({end_incl:%Y-%m-%d}). Pick the "
                 "earlier day first.", icon=":material/event_busy:")
        return None
    clusters = sb.multiselect("Cluster", cat.clusters, key="f_clusters", placeholder="All clusters") \
        if len(cat.clusters) > 1 else []
    pools = sb.multiselect("Pool (GPU type)", cat.pools, key="f_pools", placeholder="All pools")
    partitions = sb.multiselect("Partition", cat.partitions, key="f_partitions", placeholder="All partitions")
    teams = sb.multiselect("Team", cat.teams, key="f_teams", placeholder="All teams")
    return Filters(start=start, end=end_incl + dt.timedelta(days=1), clusters=tuple(clusters), pools=tuple(pools),
                   partitions=tuple(partitions), teams=tuple(teams))


def default_filters(cat: queries.Catalogue) -> Filters:
    """The filters a first visit gets: the last 30 days of data, nothing else selected."""
    start, last = default_window(cat.first_day, cat.last_day)
    return Filters(start=start, end=last + dt.timedelta(days=1))


def freshness(version: str, cat: queries.Catalogue | None) -> None:
    """Always-visible data freshness: the accounting horizon, the snapshot's age, the last ingest per source."""
    box = st.sidebar.container(border=True)
    box.markdown("**Data freshness**")
    published = queries.published_at(version) if version else None
    if cat is not None and cat.horizon is not None:
        box.caption(f"Accounting up to **{cat.horizon:%Y-%m-%d %H:%M} UTC**")
    box.caption(f"Snapshot published {ui.ago(published)}" + (f" ({published:%Y-%m-%d %H:%M} UTC)" if published else ""))
    fr = queries.freshness(version) if version else None
    if fr is None or fr.height == 0:
        box.caption("No ingest recorded yet.")
        return
    lines = [f"- {r['source']}: {ui.ago(r['last_ingest'])}" for r in fr.iter_rows(named=True)]
    box.markdown("Last ingest per source  \n" + "\n".join(lines))
