"""gpuledger dashboards: the Streamlit entry script (``gpuledger dashboard`` runs it).

It reads only the serving snapshot of the warehouse named by ``$GPULEDGER_DB`` (``serve`` sets it), renders
the sidebar every page shares (filters and data freshness), and hands over to the chosen page.
"""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from dashboards import model_reads, prewarm, queries, sidebar, ui

HERE = Path(__file__).resolve().parent
PAGES = HERE / "views"   # not "pages/": Streamlit 1.67 would run that directory in legacy mode on a cold deep link

# The favicon is the logo's mark, served inline: a ":material/...:" page icon makes the browser fetch an SVG from
# fonts.gstatic.com (the dashboard fetches nothing from outside the server it is served by).
st.set_page_config(page_title="gpuledger", page_icon=str(HERE / "icon.svg"), layout="wide",
                   initial_sidebar_state="expanded")


def _page(name: str, title: str, icon: str, default: bool = False) -> st.Page:
    return st.Page(PAGES / f"{name}.py", title=title, icon=f":material/{icon}:", url_path=name, default=default)


def main() -> None:
    state = queries.current().state()
    cat = queries.catalogue(state.version) if state.exists else None
    st.logo(str(HERE / "logo.svg"), size="large")
    if cat is None or cat.jobs == 0:
        pages = [_page("welcome", "Getting started", "rocket_launch", default=True)]
        if cat is not None:
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
            "Operations": [_page("data_health", "Data health", "health_and_safety")],
        }
        flt = sidebar.filters(cat)
        prewarm.ensure(state.version, sidebar.default_filters(cat))
    if flt is not None:
        ui.set_context(ui.Context(version=state.version, cat=cat, filters=flt,
                                  currency=model_reads.currency(state.version)))
    sidebar.freshness(state.version, cat)
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
