"""The explorer's server answers only its own Host and Origin, and no request imports a module.

A real server on loopback, raw HTTP and websocket upgrade requests written byte by byte (so the
Host, Origin and fetch-metadata headers are exactly what a rebinding or cross-site page sends).
"""
from __future__ import annotations

import base64
import contextlib
import itertools
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from exporters.http_policy import HostPolicy, refusal

REPO = Path(__file__).resolve().parents[2]
EXTRA = "mybox.test"  # a name the user allowed (serve(allowed_hosts=...))
SIDEFX = "import pathlib\npathlib.Path({marker!r}).write_text('imported')\nclass Thing:\n    __css__ = ['x.css']\n"


def raw_response(port: int, path: str, headers: list[tuple[str, str]], method: str = "GET"
                 ) -> tuple[int, dict[str, list[str]], str]:
    """Send one request with exactly these headers (no Host added); return its status, its response
    headers (lower-cased names, every value) and its body."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
        sock.sendall(head.encode("latin-1"))
        data = b""
        while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
            data += chunk
        top, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length:\s*(\d+)", top)
        want = 0 if (method == "HEAD" or top.startswith(b"HTTP/1.1 101") or not length) else int(length.group(1))
        while len(body) < min(want, 1 << 16) and (chunk := sock.recv(65536)):
            body += chunk
    match = re.match(rb"HTTP/1\.[01] (\d{3})", top)
    assert match, f"no status line in {data[:200]!r}"
    found: dict[str, list[str]] = {}
    for line in top.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        found.setdefault(name.strip().lower(), []).append(value.strip())
    return int(match.group(1)), found, body.decode("latin-1")


def raw_request(port: int, path: str, headers: list[tuple[str, str]], method: str = "GET") -> tuple[int, str]:
    """Send one request with exactly these headers (no Host added); return its status and its body."""
    status, _, body = raw_response(port, path, headers, method)
    return status, body


def upgrade_headers() -> list[tuple[str, str]]:
    return [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", base64.b64encode(os.urandom(16)).decode())]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The explorer on a tiny model, served in this process, with one extra allowed name."""
    from app.explorer import free_port, serve
    from app.factory import open_factory

    loaded = open_factory("tests.models:tiny_llama")
    port = free_port()
    thread = serve(loaded, port, threaded=True, allowed_hosts=(EXTRA,))
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/liveness", timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        yield port
    finally:
        thread.stop()


def test_the_dns_rebinding_upgrade_is_refused_whatever_the_fetch_metadata_says(server):
    """The issue's reproduction: Host and Origin both the rebound name, Sec-Fetch-Site same-origin."""
    port = server
    for site in ("same-origin", "none", None):
        headers = [("Host", f"evil.example:{port}"), ("Origin", f"http://evil.example:{port}")]
        headers += [("Sec-Fetch-Site", site)] if site else []
        status, _ = raw_request(port, "/ws", headers + upgrade_headers())
        assert status == 421, site
    status, body = raw_request(port, "/", [("Host", f"evil.example:{port}")])
    assert status == 421 and "<html" not in body.lower()


def csp_directives(value: str) -> dict[str, list[str]]:
    """A Content-Security-Policy value as {directive: sources}."""
    parts = (d.split() for d in value.split(";") if d.strip())
    return {p[0].lower(): p[1:] for p in parts}


def test_every_answer_carries_the_security_headers(server):
    """The page, its scripts and styles, the liveness probe, the websocket upgrade, a refusal of each kind,
    the long-link redirect and the component 404: each carries exactly one of each header, with the policy
    written out here (what the page may load, and that no other page may frame it)."""
    port = server
    own = [("Host", f"127.0.0.1:{port}")]
    cases = {
        "page": ("/", own, 200), "bokeh": ("/static/js/bokeh.min.js", own, 200),
        "panel": ("/static/extensions/panel/panel.min.js", own, 200), "liveness": ("/liveness", own, 200),
        "websocket": ("/ws", own + [("Origin", f"http://127.0.0.1:{port}")] + upgrade_headers(), 101),
        "wrong host": ("/", [("Host", f"evil.example:{port}")], 421),
        "foreign origin": ("/liveness", own + [("Origin", "http://evil.example")], 403),
        "long link": ("/?view=" + "x" * 20_000, own, 303),
        "component": ("/components/sidefx/Thing/__css__/x.css", own, 404), "unknown": ("/nope", own, 404),
    }
    for name, (path, headers, status) in cases.items():
        got, found, _ = raw_response(port, path, headers)
        assert got == status, (name, got)
        for header in ("content-security-policy", "x-frame-options", "x-content-type-options", "referrer-policy"):
            assert len(found.get(header, [])) == 1, (name, header, found.get(header))
        assert found["x-frame-options"] == ["DENY"] and found["x-content-type-options"] == ["nosniff"], name
        assert found["referrer-policy"] == ["no-referrer"], name
        csp = csp_directives(found["content-security-policy"][0])
        assert csp["frame-ancestors"] == ["'none'"] and csp["object-src"] == ["'none'"], name
        assert csp["default-src"] == ["'self'"] and csp["connect-src"] == ["'self'"], name
        assert csp["base-uri"] == ["'self'"] and csp["form-action"] == ["'self'"], name
        # nothing from another host: every source of every directive is a keyword, data: or blob:
        hosts = [s for sources in csp.values() for s in sources
                 if not (s.startswith("'") or s in ("data:", "blob:"))]
        assert hosts == [], (name, hosts)


HOSTS = ["127.0.0.1:{p}", "localhost:{p}", "[::1]:{p}", EXTRA + ":{p}", "LOCALHOST:{p}",
         "evil.example:{p}", "127.0.0.1", "127.0.0.1:1", "127.0.0.1.nip.io:{p}", None, "twice"]
ORIGINS = [None, "http://127.0.0.1:{p}", "http://localhost:{p}", "http://evil.example:{p}",
           "http://127.0.0.1:1", "https://127.0.0.1:{p}", "null"]
SITES = [None, "same-origin", "none", "same-site", "cross-site"]


def expected(host: str | None, origin: str | None, site: str | None, websocket: bool, port: int) -> int:
    """What the issue asks, written out: own Host, own Origin (required on a websocket), no cross-site load."""
    own = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"{EXTRA}:{port}"}
    if host is None or host == "twice":
        return 400  # Tornado itself answers an HTTP/1.1 request without Host or with two, before routing
    if host.lower() not in own:
        return 421
    if origin is not None and origin.lower() not in {f"http://{h}" for h in own}:
        return 403
    if websocket and origin is None:
        return 403
    if site in ("same-site", "cross-site"):  # a websocket or fetch from another site (not a navigation)
        return 403
    return 101 if websocket else 200


def test_every_header_combination_on_the_page_and_the_websocket(server):
    port = server
    seen = {}
    for host, origin, site, websocket in itertools.product(HOSTS, ORIGINS, SITES, (False, True)):
        h = None if host is None else host.format(p=port)
        o = None if origin is None else origin.format(p=port)
        headers = [] if h is None else ([("Host", f"127.0.0.1:{port}"), ("Host", f"127.0.0.1:{port}")]
                                        if h == "twice" else [("Host", h)])
        headers += [("Origin", o)] if o else []
        headers += [("Sec-Fetch-Site", site)] if site else []
        headers += upgrade_headers() if websocket else []
        status, _ = raw_request(port, "/ws" if websocket else "/liveness", headers)
        want = expected(h, o, site, websocket, port)
        assert status == want, (h, o, site, websocket, status)
        seen[want] = seen.get(want, 0) + 1
    assert set(seen) == {101, 200, 400, 403, 421}  # every outcome was exercised


def test_a_navigation_from_another_site_still_opens_the_page(server):
    """A link from another page (top-level navigation) opens the page; its subresource loads do not."""
    port = server
    nav = [("Host", f"127.0.0.1:{port}"), ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "navigate"),
           ("Sec-Fetch-Dest", "document")]
    assert raw_request(port, "/liveness", nav)[0] == 200
    frame = [("Host", f"127.0.0.1:{port}"), ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "navigate"),
             ("Sec-Fetch-Dest", "iframe")]
    assert raw_request(port, "/liveness", frame)[0] == 403
    img = [("Host", f"127.0.0.1:{port}"), ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "no-cors"),
           ("Sec-Fetch-Dest", "image")]
    assert raw_request(port, "/static/js/bokeh.min.js", img)[0] == 403


def test_every_method_and_route_is_checked_before_its_handler(server):
    port = server
    for method in ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"):
        for path in ("/", "/ws", "/liveness", "/autoload.js", "/metadata", "/static/js/bokeh.min.js",
                     "/static/extensions/panel/panel.min.js", "/components/sidefx/Thing/__css__/x.css", "/nope"):
            status, body = raw_request(port, path, [("Host", f"evil.example:{port}"), ("Content-Length", "0")], method)
            assert status == 421, (method, path, status)
    status, body = raw_request(port, "/static/js/bokeh.min.js", [("Host", f"localhost:{port}")])
    assert status == 200 and len(body) > 10_000


def test_the_guard_is_the_first_rule_and_no_route_resolves_a_module(server):
    """The Tornado application's routes: the guard first, Panel's component route answered without import."""
    from panel.io.server import ComponentResourceHandler
    from panel.io.state import state

    from app.http_guard import NotServed, guarded

    apps = [srv._tornado for srv, _, _ in state._servers.values() if getattr(srv, "port", None) == server]
    assert len(apps) == 1
    app = apps[0]
    assert guarded(app)
    targets = [rule.target for rule in app.wildcard_router.rules]
    assert NotServed in targets
    assert not any(isinstance(t, type) and issubclass(t, ComponentResourceHandler) for t in targets)


def test_no_component_url_imports_a_module_and_the_server_keeps_answering(server, tmp_path, monkeypatch):
    """A side-effect module on the server's path, `setup` and `antigravity`: nothing is imported."""
    port = server
    marker = tmp_path / "imported.txt"
    (tmp_path / "sidefx.py").write_text(SIDEFX.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = {m for m in ("sidefx", "setup", "antigravity", "this") if m in sys.modules}
    own = [("Host", f"127.0.0.1:{port}")]
    for name in ("sidefx", "setup", "antigravity", "this", "os", "panel"):
        for tail in ("Thing/__css__/x.css", "x/y/z", "x/y/z/w"):
            status, _ = raw_request(port, f"/components/{name}/{tail}", own)
            assert status == 404, (name, tail, status)
    assert not marker.exists()
    assert {m for m in ("sidefx", "setup", "antigravity", "this") if m in sys.modules} == before
    assert raw_request(port, "/liveness", own)[0] == 200


def test_a_user_allowed_name_is_served_and_a_bad_one_refused_typed():
    from app.serving import serve_page
    from tracer.errors import InvalidInputError

    with pytest.raises(InvalidInputError) as info:
        serve_page(lambda: pytest.fail("a page was built"), "t", 1, allowed_hosts=("evil.example/x",))  # before any page or bind
    assert info.value.code and "allowed_hosts" in info.value.site
    policy = HostPolicy.loopback(8000, ("Box.Local", "other:9000"))
    assert {"box.local:8000", "other:9000", "127.0.0.1:8000", "localhost:8000", "[::1]:8000"} == set(policy.hosts)
    assert refusal(policy, lambda n: {"Host": ["box.local:8000"]}.get(n, [])) is None
    assert refusal(policy, lambda n: {"Host": ["other:8000"]}.get(n, []))[0] == 421


@pytest.mark.slow
def test_the_console_script_imports_nothing_a_url_names_from_its_launch_folder(tmp_path):
    """The issue's case: `--model mymodel:build` makes the launch folder importable; a URL names its modules."""
    marker = tmp_path / "imported.txt"
    (tmp_path / "sidefx.py").write_text(SIDEFX.format(marker=str(marker)))
    (tmp_path / "setup.py").write_text(SIDEFX.format(marker=str(marker)))
    (tmp_path / "mymodel.py").write_text("from tests.models import tiny_llama\n\ndef build():\n    return tiny_llama()\n")
    script = Path(sys.executable).with_name("torchlens-explore")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([str(script), "--model", "mymodel:build", "--no-browser", "--allow-host", EXTRA], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        deadline = time.monotonic() + 180
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            m = re.search(r"serving on http://127\.0\.0\.1:(\d+)/", line)
            url = m and int(m.group(1))
        assert url, "the URL was never printed"
        port = url
        own = [("Host", f"127.0.0.1:{port}")]
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if raw_request(port, "/liveness", own)[0] == 200:
                    break
            time.sleep(0.2)
        for name in ("sidefx", "setup", "antigravity", "mymodel"):
            assert raw_request(port, f"/components/{name}/Thing/__css__/x.css", own)[0] == 404
            assert raw_request(port, f"/components/{name}/x/y/z", own)[0] == 404
        rebinding = [("Host", f"evil.example:{port}"), ("Origin", f"http://evil.example:{port}"),
                     ("Sec-Fetch-Site", "same-origin")]
        assert raw_request(port, "/ws", rebinding + upgrade_headers())[0] == 421
        assert raw_request(port, "/liveness", own)[0] == 200 and proc.poll() is None
        assert raw_request(port, "/liveness", [("Host", f"{EXTRA}:{port}")])[0] == 200  # --allow-host
        assert not marker.exists()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
