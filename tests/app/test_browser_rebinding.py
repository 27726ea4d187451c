"""Chromium against the explorer: a rebound name gets no session; the page's own names draw, fetching
nothing from off the machine.

Chromium resolves `evil.example` to 127.0.0.1 (`--host-resolver-rules`), as a DNS-rebinding attack
makes it do; the attacker's page is served at `http://evil.example:PORT/` by the test itself.
Chromium's own private-network checks are turned off, as in a browser without them (the issue's
attack drew the graph): what refuses here is the server.
"""
from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.conftest import CHROMIUM_ARGS

from . import pagekit
from .conftest import served

pytestmark = [pytest.mark.slow, pytest.mark.browser]

NO_PRIVATE_NETWORK_CHECKS = ",".join((
    "BlockInsecurePrivateNetworkRequests", "PrivateNetworkAccessSendPreflights",
    "PrivateNetworkAccessRespectPreflightResults", "LocalNetworkAccessChecks"))
LOOPBACK = {"127.0.0.1", "localhost", "[::1]", "::1"}
ATTACK = """<!doctype html><title>attack</title><script>
window.result = new Promise(done => {
  const out = {};
  const ws = (url, key) => new Promise(r => { const s = new WebSocket(url);
    s.onopen = () => { out[key] = 'open'; s.close(); r(); }; s.onerror = () => { out[key] = 'error'; r(); }; });
  Promise.all([
    ws(location.origin.replace('http', 'ws') + '/ws', 'same_name_ws'),
    ws('ws://127.0.0.1:' + location.port + '/ws', 'loopback_ws'),
    fetch('/').then(r => { out.fetch = r.status; }, () => { out.fetch = 'error'; }),
    fetch('http://127.0.0.1:' + location.port + '/liveness').then(r => { out.cors = r.status; },
                                                                  () => { out.cors = 'error'; }),
  ]).then(() => done(out));
});
</script>"""


@pytest.fixture(scope="module")
def app_url():
    from app.factory import open_factory

    with served(open_factory("tests.models:tiny_llama")) as url:
        yield url


@pytest.fixture
def rebinding_browser(browser_type, browser_type_launch_args):
    browser = browser_type.launch(**{**browser_type_launch_args,
                                     "args": [*CHROMIUM_ARGS, "--host-resolver-rules=MAP evil.example 127.0.0.1",
                                              f"--disable-features={NO_PRIVATE_NETWORK_CHECKS}"]})
    yield browser
    browser.close()


def off_machine_log(context) -> list[str]:
    """Every request the context makes to a host that is not loopback, aborted (none leaves the machine)."""
    seen: list[str] = []

    def check(route):
        host = urlsplit(route.request.url).hostname or ""
        if route.request.url.startswith(("data:", "blob:")) or host in LOOPBACK:
            return route.continue_()
        seen.append(route.request.url)
        return route.abort()

    context.route("**/*", check)
    return seen


def test_a_rebound_name_gets_no_page_no_websocket_and_no_session(app_url, rebinding_browser):
    port = urlsplit(app_url).port
    context = rebinding_browser.new_context()
    page = context.new_page()
    response = page.goto(f"http://evil.example:{port}/")
    assert response.status == 421
    assert page.evaluate("() => typeof window.Bokeh") == "undefined"  # no app page, nothing drawn
    # the attacker's own page at the rebound origin, then its websocket and fetches to the server
    context.route(f"http://evil.example:{port}/attack.html",
                  lambda route: route.fulfill(status=200, content_type="text/html", body=ATTACK))
    page.goto(f"http://evil.example:{port}/attack.html")
    result = page.evaluate("() => window.result")
    assert result == {"same_name_ws": "error", "loopback_ws": "error", "fetch": 421, "cors": "error"}, result
    context.close()


def test_the_page_draws_under_its_own_names_and_fetches_nothing_off_the_machine(app_url, rebinding_browser):
    port = urlsplit(app_url).port
    context = rebinding_browser.new_context(viewport={"width": 1600, "height": 1000})
    outside = off_machine_log(context)
    page = context.new_page()
    for host in ("127.0.0.1", "localhost"):
        response = page.goto(f"http://{host}:{port}/")
        assert response.status == 200
        pagekit.wait_graph(page, 60_000)
        assert pagekit.nodes(page)
    for tab in page.locator(".tlx-tabs .bk-tab").all():  # every side tab once (each builds its panel)
        tab.click()
        page.wait_for_timeout(300)
    page.wait_for_load_state("networkidle")
    assert outside == []
    context.close()
