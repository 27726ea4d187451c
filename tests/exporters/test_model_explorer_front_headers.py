"""Every answer of the Model Explorer front carries the security headers (CSP, no framing, nosniff, no
Referer), whatever it answers: a forwarded page and script, its own answers, each kind of refusal, a
backend that is down.

The backend here is a real HTTP server on loopback that plays the vendor server's part (a page and a
script), so the test needs no `model_explorer` install; the viewer itself under the same headers is
`tests/exporters/test_model_explorer_guard.py::test_chromium_loads_the_viewer_through_the_front_with_no_request_off_the_machine`.
"""
from __future__ import annotations

import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from exporters.http_policy import security_headers
from exporters.model_explorer.front import CSP, ModelExplorerFront

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _Backend(BaseHTTPRequestHandler):
    def log_message(self, *_args) -> None:
        return

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/":
            body, kind = b"<!doctype html><title>viewer</title><script src='/main.js'></script>", "text/html"
        elif self.path == "/main.js":
            body, kind = b"console.log(1)", "application/javascript"
        else:
            body, kind = b"missing", "text/plain"
            self.send_response(404)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def front():
    backend = ThreadingHTTPServer(("127.0.0.1", 0), _Backend)
    thread = threading.Thread(target=backend.serve_forever, daemon=True)
    thread.start()
    fronts = [ModelExplorerFront(f"http://127.0.0.1:{backend.server_address[1]}", []),
              ModelExplorerFront("http://127.0.0.1:9", [])]  # a backend that is down (port 9: discard, closed)
    try:
        yield fronts
    finally:
        for f in fronts:
            f.stop()
        backend.shutdown()
        backend.server_close()


def _answer(port: int, path: str, headers: dict[str, str], method: str = "GET") -> tuple[int, dict[str, list[str]]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers, method=method)
    try:
        with _OPENER.open(request, timeout=30) as resp:
            return resp.status, {k.lower(): resp.headers.get_all(k) for k in resp.headers.keys()}
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): exc.headers.get_all(k) for k in exc.headers.keys()}


def test_every_answer_of_the_front_carries_the_security_headers(front):
    up, down = front
    own = {"Host": f"127.0.0.1:{up.port}"}
    cases = [
        (up, "/", own, "GET", 200), (up, "/main.js", own, "GET", 200), (up, "/nothing", own, "GET", 404),
        (up, "/api/v1/check_new_version", own, "GET", 200), (up, "/api/v1/send_command", own, "GET", 404),
        (up, "/api/v1/read_text_file?path=/etc/passwd", own, "GET", 403),
        (up, "/", {"Host": f"evil.example:{up.port}"}, "GET", 421),
        (up, "/", {**own, "Origin": "http://evil.example"}, "GET", 403), (up, "/", own, "POST", 405),
        (down, "/", {"Host": f"127.0.0.1:{down.port}"}, "GET", 502),
    ]
    want = security_headers(CSP)
    assert "frame-ancestors 'none'" in want["Content-Security-Policy"] and want["X-Frame-Options"] == "DENY"
    for server, path, headers, method, status in cases:
        got, found = _answer(server.port, path, headers, method)
        assert got == status, (path, headers, method, got)
        for name, value in want.items():
            assert found.get(name.lower()) == [value], (path, method, name, found.get(name.lower()))
