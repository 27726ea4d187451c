"""The Model Explorer front the project starts: its own Host and Origin only, and a page that loads
nothing from off the machine (the vendor's page fetches Google's fonts; the front's does not)."""
from __future__ import annotations

import http.client
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import torch

import tracer
from exporters import model_explorer as me
from tests.conftest import CHROMIUM_ARGS
from tests.models import tiny_gpt2

pytestmark = pytest.mark.slow
EXTRA = "mybox.test"
LOOPBACK = {"127.0.0.1", "localhost", "[::1]", "::1"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    trace = tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 8)),))
    path = me.export(trace, tmp_path_factory.mktemp("me-guard") / "gpt2.json")
    running = me.serve(path, allowed_hosts=(EXTRA,))
    with running:
        yield running


def request(port: int, path: str, headers: dict[str, str], method: str = "GET") -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_the_front_answers_its_own_names_and_origins_only(server):
    p = server.port
    own = {"Host": f"127.0.0.1:{p}"}
    for host in (f"127.0.0.1:{p}", f"localhost:{p}", f"[::1]:{p}", f"{EXTRA}:{p}"):
        assert request(p, "/check_health", {"Host": host})[0] == 200, host
    for site in ("same-origin", "none", None):  # the rebinding request, whatever the fetch metadata says
        headers = {"Host": f"evil.example:{p}", "Origin": f"http://evil.example:{p}"}
        if site:
            headers["Sec-Fetch-Site"] = site
        status, _, body = request(p, "/", headers)
        assert status == 421 and b"<html" not in body.lower()
    for method in ("GET", "POST", "HEAD"):
        assert request(p, "/check_health", {"Host": f"evil.example:{p}"}, method)[0] == 421, method
    assert request(p, "/check_health", {**own, "Origin": f"http://evil.example:{p}"})[0] == 403
    assert request(p, "/check_health", {**own, "Origin": f"http://127.0.0.1:{p}"})[0] == 200
    cross = {**own, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "script"}
    assert request(p, "/check_health", cross)[0] == 403
    nav = {**own, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    assert request(p, "/", nav)[0] == 200


def test_the_server_behind_the_front_answers_only_the_front(server):
    """The vendor server's private port: a rebound name 421, any browser request (Origin, Sec-Fetch-*) 403."""
    b = server.backend_port
    assert request(b, "/check_health", {"Host": f"127.0.0.1:{b}"})[0] == 200
    assert request(b, "/check_health", {"Host": f"evil.example:{b}"})[0] == 421
    assert request(b, "/", {"Host": f"localhost:{b}"})[0] == 421
    assert request(b, "/check_health", {"Host": f"127.0.0.1:{b}", "Sec-Fetch-Site": "same-origin"})[0] == 403
    assert request(b, "/check_health", {"Host": f"127.0.0.1:{b}", "Origin": f"http://127.0.0.1:{b}"})[0] == 403


def test_the_page_names_no_other_host_and_carries_a_same_origin_policy(server):
    p = server.port
    status, headers, body = request(p, "/", {"Host": f"127.0.0.1:{p}"})
    assert status == 200 and b"<html" in body.lower()
    assert b"fonts.gstatic.com" not in body and b"fonts.googleapis.com" not in body
    assert "default-src 'self'" in headers["content-security-policy"]


def _off_machine(context, vendor_page: bytes | None = None) -> list[str]:
    """Record and abort every off-machine request; with `vendor_page`, answer `/` with it (the control)."""
    seen: list[str] = []

    def check(route):
        url = route.request.url
        if vendor_page is not None and urlsplit(url).path == "/" and route.request.resource_type == "document":
            return route.fulfill(status=200, content_type="text/html", body=vendor_page)
        if url.startswith(("data:", "blob:")) or (urlsplit(url).hostname or "") in LOOPBACK:
            return route.continue_()
        seen.append(url)
        return route.abort()

    context.route("**/*", check)
    return seen


def _viewer_loaded(page) -> None:
    page.get_by_placeholder("Search nodes/layers by regex").wait_for(timeout=60_000)
    page.get_by_text("109 nodes").first.wait_for(timeout=60_000)
    page.evaluate("() => document.fonts.ready.then(() => document.fonts.size)")  # its fonts asked for and loaded


@pytest.mark.browser
def test_chromium_loads_the_viewer_through_the_front_with_no_request_off_the_machine(server, browser_type,
                                                                                     browser_type_launch_args):
    browser = browser_type.launch(**{**browser_type_launch_args,
                                     "args": [*CHROMIUM_ARGS, "--host-resolver-rules=MAP evil.example 127.0.0.1"]})
    try:
        # the control: the vendor's own page (as its server sends it), the rest through the front, asks Google for fonts
        import model_explorer

        vendor = (Path(model_explorer.__file__).parent / "web_app" / "index.html").read_bytes()
        control = browser.new_context(viewport={"width": 1400, "height": 900})
        asked = _off_machine(control, vendor)
        page = control.new_page()
        page.goto(server.url)
        _viewer_loaded(page)
        assert any("fonts.gstatic.com" in u for u in asked), asked
        control.close()
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        outside = _off_machine(context)
        page = context.new_page()
        page.goto(server.url)
        _viewer_loaded(page)
        assert outside == []
        context.unroute("**/*")  # evil.example resolves to 127.0.0.1 here: let the browser go there
        response = page.goto(f"http://evil.example:{server.port}/")  # a rebound name
        assert response.status == 421 and "109 nodes" not in page.locator("body").inner_text()
        context.close()
    finally:
        browser.close()
