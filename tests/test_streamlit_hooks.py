"""dashboards/streamlit_hooks.py: our middleware in Streamlit's list, in the order and place asked, once."""
from __future__ import annotations

from streamlit.web.server.starlette import starlette_app

from dashboards import streamlit_hooks


class First:
    def __init__(self, app, **kwargs) -> None:
        self.app, self.kwargs = app, kwargs


class Last(First):
    pass


def test_outermost_goes_first_innermost_last_each_once(monkeypatch):
    shipped = starlette_app.create_streamlit_middleware()
    monkeypatch.setattr(starlette_app, "create_streamlit_middleware", starlette_app.create_streamlit_middleware)
    assert streamlit_hooks.add_middleware(Last, outermost=False, links="<a>")
    assert streamlit_hooks.add_middleware(First, outermost=True)
    assert streamlit_hooks.add_middleware(Last, outermost=False, links="<b>")     # a second time: nothing
    stack = starlette_app.create_streamlit_middleware()
    assert stack[0].cls is First and stack[-1].cls is Last and len(stack) == len(shipped) + 2
    assert stack[-1].kwargs == {"links": "<a>"}
    assert streamlit_hooks.added() == (Last, First)


def test_a_streamlit_without_the_list_gets_nothing(monkeypatch):
    monkeypatch.delattr(starlette_app, "create_streamlit_middleware")
    assert streamlit_hooks.add_middleware(First, outermost=True) is False
    assert streamlit_hooks.added() == ()
