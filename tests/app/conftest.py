"""Fixtures for the explorer: loaded sources (captured once per module) and a served app."""
from __future__ import annotations

import contextlib
import time
import urllib.request
from pathlib import Path

import pytest

# A two-layer GPT-2 (32 wide, 100 tokens) for the browser tests of what a discharge does to the page: its twin
# builds in milliseconds, where GPT-2 small's random weights take seconds. GPT-2 small itself is discharged
# by tests/app/test_twin.py.
TINY_GPT2_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "gpt2-tiny.json"


@contextlib.contextmanager
def served(loaded):
    """Serve the explorer for `loaded` on a free loopback port in this process; stop it after."""
    from app.explorer import free_port, serve

    port = free_port()
    server = serve(loaded, port, threaded=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120  # a guard against a hang only: the wait ends when it answers
        while True:
            try:
                urllib.request.urlopen(url + "liveness", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        documents = _documents_of(server)
        server.stop()
        _forget_patched_documents(documents)


def _documents_of(thread) -> set[int]:
    """The ids of the documents of the sessions a threaded server (`serve(..., threaded=True)`) holds."""
    from panel.io.state import state

    ids = [key for key, t in state._threads.items() if t is thread]
    bokeh = state._servers.get(ids[0], (None,))[0] if ids else None
    contexts = getattr(getattr(bokeh, "_tornado", None), "_applications", {}).values()
    return {id(session.document) for context in contexts for session in context.sessions}


def _forget_patched_documents(documents: set[int]) -> None:
    """Drop the documents Bokeh still holds as patched `curdoc()` after their server stopped: a session callback
    suspended inside `bokeh.io.doc.patch_curdoc` when the server stopped never pops its document (seen after
    the 59 KB link test), and `pn.state.curdoc` falls back to that process-wide list, so every later test on
    this worker would read a dead session's document as current.

    Only the stopped server's documents (and destroyed sessions' and dead references), one entry at a time:
    another server of this worker may be inside `patch_curdoc` now, and it pops the list's last entry on its
    way out (clearing the whole list made that pop fail, a 500 for a page of the session's default server, in
    a run under load)."""
    from bokeh.io import doc as bokeh_doc

    for ref in list(bokeh_doc._PATCHED_CURDOCS):
        doc = ref()
        if doc is None or id(doc) in documents or getattr(doc.session_context, "destroyed", False):
            with contextlib.suppress(ValueError):  # popped meanwhile by the server that pushed it
                bokeh_doc._PATCHED_CURDOCS.remove(ref)


class _SessionContext:
    """Stands for a served session's context (read by `docsync.is_served` and `pn.state.session_args`)."""

    class request:  # noqa: N801
        arguments: dict = {}
        headers: dict = {}
        cookies: dict = {}


def served_document():
    """A Bokeh document that reads as a served session's (`app.views.docsync.is_served`), with no server
    behind it: a callback put on its next tick never runs."""
    import weakref

    from bokeh.document import Document

    doc, context = Document(), _SessionContext()
    doc._session_context = weakref.ref(context)
    doc._tlx_test_context = context  # alive as long as the document
    return doc


@pytest.fixture(scope="session")
def default_loaded():
    from app.sources import open_default

    return open_default()


@pytest.fixture(scope="session")
def gpt2_loaded():
    from app.sources import open_config

    return open_config("gpt2")


@pytest.fixture(scope="session")
def tiny_gpt2_loaded():
    from app.sources import open_config

    return open_config(TINY_GPT2_CONFIG)


@pytest.fixture
def tiny_loaded():
    from app.factory import open_factory

    return open_factory("tests.models:tiny_llama")


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    """A desktop-sized window, and downloads allowed (figure export)."""
    return {**browser_context_args, "viewport": {"width": 1600, "height": 1000}, "accept_downloads": True}


@pytest.fixture(scope="module")
def default_url(default_loaded):
    with served(default_loaded) as url:
        yield url


@pytest.fixture(scope="module")
def gpt2_url(gpt2_loaded):
    with served(gpt2_loaded) as url:
        yield url


@pytest.fixture(scope="module")
def tiny_gpt2_url(tiny_gpt2_loaded):
    with served(tiny_gpt2_loaded) as url:
        yield url
