"""gpuledger dashboards: the Streamlit entry script (``gpuledger dashboard`` runs it).

It reads only the serving snapshot of the warehouse named by ``$GPULEDGER_DB`` (``serve`` sets it), identifies
the viewer (dashboards/access.py: the trusted proxy's identity header and the governance file's roles; refused
requests see why and whom to ask, nothing else), renders the sidebar every page shares (filters and data
freshness) and hands over to the chosen page. Every read below runs in the viewer's data scope: the scope is part
of the version key every cached read takes.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import streamlit as st

from dashboards import access, model_reads, prewarm, queries, sidebar, ui
from ingest.errors import InputError

HERE = Path(__file__).resolve().parent
PAGES = HERE / "views"   # not "pages/": Streamlit 1.67 would run that directory in legacy mode on a cold deep link

# The favicon is the logo's mark, served inline: a ":material/...:" page icon makes the browser fetch an SVG from
# fonts.gstatic.com (the dashboard fetches nothing from outside the server it is served by).
st.set_page_config(page_title="gpuledger", page_icon=str(HERE / "icon.svg"), layout="wide",
                   initial_sidebar_state="expanded")


def _page(name: str, title: str, icon: str, default: bool = False) -> st.Page:
    return st.Page(PAGES / f"{name}.py", title=title, icon=f":material/{icon}:", url_path=name, default=default)


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+!<>|~$])")


def identify(snapshot_version: str) -> access.Scope:
    """The viewer of this request, or a refusal page and stop (see dashboards/access.py)."""
    try:
        cfg = access.config_from_env()
    except (InputError, OSError) as exc:   # the operator's mistake: the log names it, viewers see no paths
        print(f"gpuledger dashboard: {exc}", file=sys.stderr, flush=True)
        st.error("This dashboard's access configuration cannot be read; its administrator has been told in the "
                 "server log.", icon=":material/block:")
        st.stop()
    roles = queries.access_roles(snapshot_version) if snapshot_version else access.Roles()
    headers, peer = st.context.headers, st.context.ip_address
    # a real connection's peer is text, or None on loopback; only the headless test harness gives anything else
    peer = peer if isinstance(peer, str) else None
    who = access.identify([(k, v) for k in headers for v in headers.get_all(k)], peer, cfg, roles)
    if isinstance(who, access.Refusal):
        st.title(who.title)
        st.markdown(_MARKDOWN.sub(r"\\\1", who.reason))   # a user name from the header is text, never markup
        st.stop()
    access.remember(who)
    return who


def _who(who: access.Scope) -> None:
    if who is access.LOCAL_OPERATOR:
        st.sidebar.caption("Local operator, full rights: with no [access] configured this dashboard serves only "
                           "its own machine.")
    else:
        seen = "every team" if who.full else ", ".join(who.teams) + ' (other teams as one "other teams" group)'
        st.sidebar.caption(f"Signed in as **{who.user}** · {who.role.replace('_', ' ')} · sees {seen}")


def main() -> None:
    ui.load_chart_code()   # first: the browser loads the chart code while the reads below compute
    ui.load_styles()
    state = queries.current().state()
    shown = prewarm.shown(state.version)   # the previous snapshot while the new one's views are computed
    who = identify(shown)
    version = access.scoped_version(shown, who)
    cat = queries.catalogue(version) if state.exists else None
    st.logo(str(HERE / "logo.svg"), size="large")
    health = who.may("health")
    if cat is None or cat.jobs == 0:
        pages = [_page("welcome", "Getting started", "rocket_launch", default=True)]
        if cat is not None and health:
            pages.append(_page("data_health", "Data health", "health_and_safety"))
        flt = None
        if cat is not None:
            flt = sidebar.filters(cat)
    else:
        pages = {
            "Governance": [
                _page("overview", "Overview", "dashboard", default=True),
                _page("utilization", "Utilization", "stacked_bar_chart"),
                _page("efficiency", "Efficiency", "speed"),
                _page("fragmentation", "Fragmentation", "grid_view"),
                _page("fairness", "Fairness & queues", "balance"),
                _page("waiting", "Why jobs wait", "hourglass_top"),
            ],
            "Finance & planning": [
                _page("chargeback", "Chargeback", "receipt_long"),
                _page("forecast", "Forecast & capacity", "trending_up"),
            ],
        }
        pages["Operations"] = [_page("reliability", "Reliability", "build_circle")]
        if health:
            pages["Operations"].append(_page("data_health", "Data health", "health_and_safety"))
        flt = sidebar.filters(cat)
        prewarm.ensure(access.scoped_version(state.version, who), sidebar.default_filters(cat))
    if flt is not None:
        ui.set_context(ui.Context(version=version, cat=cat, filters=flt,
                                  currency=model_reads.currency(version)))
    _who(who)
    sidebar.freshness(version, cat, newer=state.version if shown != state.version else None)
    page = st.navigation(pages, position="sidebar")
    if cat is not None and flt is None:   # the sidebar refused the filters (a reversed date range) and says why
        st.info(f"{sidebar.REVERSED}: choose a first day on or before the last day in the sidebar.",
                icon=":material/event_busy:")
        return
    try:
        page.run()
    except Exception as exc:  # a model failed on this data: say so on the page, keep the app (and sidebar) alive
        ui.page_failed(page.title, exc)


main()
