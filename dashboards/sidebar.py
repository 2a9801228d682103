"""The sidebar every page shares: the global filters and the data's freshness, and the view in the URL.

The view is in the page's URL query string, both ways, so a link pasted into an email opens the same view:
``?window=90d`` (a preset: the last 90 days of data when the link is opened; ``7d``, ``30d``, ``90d``, ``1y``,
``all``) or ``?from=2026-10-01&to=2026-10-31`` (fixed days, the last one inclusive), and the filters as repeated
parameters (``&team=nlp&team=vision&pool=h100``; also ``cluster``, ``partition``). A page keeps its own
settings in parameters of its own (:func:`page_param`, e.g. the Efficiency page's ``user``). The URL is read
once, on a session's first run (a visitor's widget changes win afterwards), and rewritten after every change;
the default view (the last 30 days, no filter) has a bare URL. Values the snapshot does not offer are dropped.
"""
from __future__ import annotations

import datetime as dt
import urllib.parse

import streamlit as st

from dashboards import queries, ui
from dashboards.filters import DEFAULT_WINDOW, WINDOWS, Filters, default_window, preset_window

#: The window pills: label -> preset name in the URL (filters.WINDOWS).
PRESETS = {"7 days": "7d", "30 days": "30d", "90 days": "90d", "1 year": "1y", "All": "all"}
_DATES = "f_dates"
#: URL parameter -> the sidebar widget (session key) it restores.
URL_FILTERS = {"cluster": "f_clusters", "pool": "f_pools", "partition": "f_partitions", "team": "f_teams"}
#: Every URL parameter the sidebar owns (the rest belong to pages).
URL_KEYS = ("window", "from", "to", *URL_FILTERS)
_URL_READ = "_url_read"
#: What the sidebar says when the first day of the range is after the last (nothing is computed then).
REVERSED = "Date range reversed"


def _apply_preset(cat: queries.Catalogue) -> None:
    choice = st.session_state.get("f_preset")
    if not choice or cat.last_day is None:
        return
    st.session_state[_DATES] = preset_window(PRESETS[choice], cat.first_day, cat.last_day)


def _day(text: str | None) -> dt.date | None:
    try:
        return dt.date.fromisoformat(text) if text else None
    except ValueError:
        return None


def _read_url(cat: queries.Catalogue) -> None:
    """A session's first run: restore the view the URL carries (window, dates, filters) into the widgets."""
    if st.session_state.get(_URL_READ):
        return
    st.session_state[_URL_READ] = True
    qp = st.query_params
    window = qp.get("window")
    lo, hi = _day(qp.get("from")), _day(qp.get("to"))
    if window in WINDOWS:
        st.session_state["f_preset"] = next(k for k, v in PRESETS.items() if v == window)
        st.session_state[_DATES] = preset_window(window, cat.first_day, cat.last_day)
    elif lo or hi:
        st.session_state[_DATES] = (lo or hi, hi or lo)
    offered = {"cluster": cat.clusters, "pool": cat.pools, "partition": cat.partitions, "team": cat.teams}
    for param, key in URL_FILTERS.items():
        chosen = [v for v in dict.fromkeys(qp.get_all(param)) if v in offered[param]]
        if chosen:
            st.session_state[key] = chosen


def url_params(f: Filters, cat: queries.Catalogue, preset: str | None = None) -> dict[str, str | list[str]]:
    """The query parameters of a view: the window (a preset's name when ``preset`` names one, else the days;
    nothing for the default window) and every active filter."""
    out: dict[str, str | list[str]] = {}
    last = f.end - dt.timedelta(days=1)
    if preset is None and (f.start, last) == preset_window(DEFAULT_WINDOW, cat.first_day, cat.last_day):
        preset = DEFAULT_WINDOW
    if preset and (f.start, last) == preset_window(preset, cat.first_day, cat.last_day):
        if preset != DEFAULT_WINDOW:
            out["window"] = preset
    else:
        out["from"], out["to"] = f"{f.start:%Y-%m-%d}", f"{last:%Y-%m-%d}"
    for param, name in (("cluster", "clusters"), ("pool", "pools"), ("partition", "partitions"), ("team", "teams")):
        if f.dimensions()[name]:
            out[param] = list(f.dimensions()[name])
    return out


def view_params(f: Filters, cat: queries.Catalogue) -> dict[str, str | list[str]]:
    """The query parameters of the view on screen (the window preset chosen in the sidebar, if any)."""
    choice = st.session_state.get("f_preset")
    return url_params(f, cat, PRESETS.get(choice) if choice else None)


def query_string(params: dict[str, str | list[str]]) -> str:
    """``params`` as a URL query string (``?a=1&b=x&b=y``; '' when empty)."""
    return ("?" + urllib.parse.urlencode(params, doseq=True)) if params else ""


def _write_url(params: dict[str, str | list[str]], owned: tuple[str, ...]) -> None:
    """Make the URL's parameters in ``owned`` exactly ``params`` (each changed only if it differs: every change
    is a message to the browser)."""
    qp = st.query_params
    for key in owned:
        want = params.get(key)
        have = qp.get_all(key)
        if want is None:
            if have:
                del qp[key]
        elif (list(want) if isinstance(want, list) else [want]) != have:
            qp[key] = want


def page_param(name: str, value: str | None) -> None:
    """Keep a page's own setting ``name`` in the URL (None or '' removes it)."""
    _write_url({name: value} if value else {}, (name,))


def url_value(name: str) -> str | None:
    """A page's own URL parameter as the link gave it (None when absent)."""
    return st.query_params.get(name)


def _clear_preset() -> None:
    st.session_state["f_preset"] = None


def filters(cat: queries.Catalogue) -> Filters | None:
    """Render the filter widgets (their state survives page switches) and return the chosen Filters; None when
    the date range is reversed (the sidebar says so and no page computes anything for it)."""
    sb = st.sidebar
    sb.markdown("### Filters")
    first, last = cat.first_day, cat.last_day
    _read_url(cat)
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
    f = Filters(start=start, end=end_incl + dt.timedelta(days=1), clusters=tuple(clusters), pools=tuple(pools),
                partitions=tuple(partitions), teams=tuple(teams))
    _write_url(view_params(f, cat), URL_KEYS)
    return f


def default_filters(cat: queries.Catalogue) -> Filters:
    """The filters a first visit gets: the last 30 days of data, nothing else selected."""
    start, last = preset_window(DEFAULT_WINDOW, cat.first_day, cat.last_day)
    return Filters(start=start, end=last + dt.timedelta(days=1))


def freshness(version: str, cat: queries.Catalogue | None, newer: str | None = None) -> None:
    """Always-visible data freshness: the accounting horizon, the snapshot's age, the last ingest per source;
    ``newer``: the version of a snapshot published after the one shown, whose views are being computed."""
    box = st.sidebar.container(border=True)
    box.markdown("**Data freshness**")
    published = queries.published_at(version) if version else None
    if cat is not None and cat.horizon is not None:
        box.caption(f"Accounting up to **{cat.horizon:%Y-%m-%d %H:%M} UTC**")
    box.caption(f"Snapshot published {ui.ago(published)}" + (f" ({published:%Y-%m-%d %H:%M} UTC)" if published else ""))
    if newer:
        box.caption(f"A newer snapshot (published {ui.ago(queries.published_at(newer))}) is being prepared; "
                    "the pages show it as soon as its views are computed.")
    fr = queries.freshness(version) if version else None
    if fr is None or fr.height == 0:
        box.caption("No ingest recorded yet.")
        return
    lines = [f"- {r['source']}: {ui.ago(r['last_ingest'])}" for r in fr.iter_rows(named=True)]
    box.markdown("Last ingest per source  \n" + "\n".join(lines))
