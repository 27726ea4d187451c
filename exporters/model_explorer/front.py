"""A loopback front for the Model Explorer server: the only door a browser gets.

It binds 127.0.0.1, answers only requests that `exporters.http_policy.refusal` lets through (Host
`127.0.0.1:PORT`, `localhost:PORT` or `[::1]:PORT`: a DNS-rebinding page sends its own name; no
foreign Origin; no cross-site subresource), forwards GETs on the routes the viewer uses, and lets
`read_text_file` read only the files it was started for. Everything else is refused. The viewer's
page is served without its links to Google's font servers (the same fonts ship in its static files),
and every answer carries a Content-Security-Policy that lets the page load from this server only.
"""
from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterable
from urllib.parse import parse_qs, quote, unquote, urlsplit

from ..http_policy import HostPolicy, refusal, security_headers

READ_FILE = "/api/v1/read_text_file"
FORWARDED_API = frozenset({"/check_health", "/api/v1/get_extensions", "/api/v1/load_graphs_json",
                           "/api/v1/load_node_data", READ_FILE})
NO_NEW_VERSION = {"version": "", "runningVersion": "", "releaseUrl": "", "desktopAppUrl": ""}
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
# The page may load only from this server (inline styles and scripts, data: and blob: as the viewer uses).
CSP = "default-src 'self' 'unsafe-inline' 'unsafe-eval' data: blob:; frame-ancestors 'none'; form-action 'self'"
_EXTERNAL_LINK = re.compile(rb"<link\b[^>]*\bhref\s*=\s*[\"']?(?:https?:)?//[^>]*>", re.I)
_EXTERNAL_FONT_FACE = re.compile(rb"@font-face\s*\{[^}]*url\(\s*[\"']?(?:https?:)?//[^}]*\}", re.I)


def local_page(html: bytes) -> bytes:
    """The viewer's page without `<link>`s to other hosts or `@font-face` rules that fetch from them."""
    return _EXTERNAL_FONT_FACE.sub(b"", _EXTERNAL_LINK.sub(b"", html))


def allowed_route(path: str) -> bool:
    """Routes forwarded to the server: the viewer's API calls above and its static files (not other API)."""
    if path in FORWARDED_API:
        return True
    return not path.startswith(("/api", "/apipost", "/apistream"))


class ModelExplorerFront:
    """A running front on 127.0.0.1:`port` forwarding to the server at `backend`; `stop()` closes it."""

    def __init__(self, backend: str, files: Iterable[str | Path], port: int = 0,
                 allowed_hosts: Iterable[str] = ()) -> None:
        self.backend = backend.rstrip("/")
        self.files = frozenset(str(Path(f).resolve()) for f in files)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.policy = HostPolicy.loopback(self.port, allowed_hosts)
        self.hosts = self.policy.hosts
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="model-explorer-front", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket (safe to call twice)."""
        if self._thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()

    def may_read(self, query: str) -> bool:
        """True when `read_text_file?path=` names exactly one of the exported files."""
        paths = parse_qs(query).get("path", [])
        if len(paths) != 1:
            return False
        try:
            return str(Path(paths[0]).expanduser().resolve()) in self.files
        except (OSError, RuntimeError, ValueError):
            return False


def _handler_for(front: ModelExplorerFront) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "torchlens-explore-front"
        sys_version = ""

        def log_message(self, *_args) -> None:  # quiet: the app prints what matters
            return

        def _refused(self) -> bool:
            why = refusal(front.policy, lambda name: self.headers.get_all(name) or [])
            if why is not None:
                self._refuse(*why)
            return why is not None

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self._refused():
                return
            url = urlsplit(self.path)
            path = unquote(url.path)  # decide on the path the server will route, not on its encoding
            if not path.startswith("/") or "//" in path or "\\" in path or ".." in path.split("/"):
                return self._refuse(404, "not a plain path")
            if path == "/api/v1/check_new_version":
                return self._send(200, json.dumps(NO_NEW_VERSION).encode(), "application/json")
            if not allowed_route(path):
                return self._refuse(404, f"{path} is not served here")
            if path == READ_FILE and not front.may_read(url.query):
                return self._refuse(403, "only the exported graph files can be read")
            self._forward(quote(path) + (f"?{url.query}" if url.query else ""))

        def do_HEAD(self) -> None:  # noqa: N802
            self._refused() or self._refuse(405, "GET only")

        def do_POST(self) -> None:  # noqa: N802
            self._refused() or self._refuse(405, "GET only")

        do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_POST

        def _forward(self, path: str) -> None:
            try:
                with _OPENER.open(front.backend + path, timeout=60) as resp:
                    kind = resp.headers.get("Content-Type", "application/octet-stream")
                    body = resp.read()
                    self._send(resp.status, local_page(body) if kind.startswith("text/html") else body, kind)
            except urllib.error.HTTPError as exc:
                self._send(exc.code, exc.read(), exc.headers.get("Content-Type", "text/plain"))
            except (urllib.error.URLError, OSError):
                self._refuse(502, "the Model Explorer server did not answer")

        def _refuse(self, status: int, why: str) -> None:
            self._send(status, json.dumps({"error": why}).encode(), "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            for name, value in security_headers(CSP).items():  # CSP, no framing, nosniff, no Referer
                self.send_header(name, value)
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler
