"""Exports downloaded over plain HTTP: `GET /tlx-download/<token>` on the explorer's own server.

A Panel `FileDownload` sends its file base64-encoded in a websocket message, which the page then
decodes: for the default 8B's Model Explorer JSON that took 5.2 times the export itself (issue 36
item 5). Here the page's download button is a link to this route: following it writes the export on
a thread (`Download.produce`, the same code the widget ran) and the file is streamed from disk in
chunks, with the browser's own download machinery on the other end.

A token is 32 random bytes issued to one session's export panel for one export and withdrawn when
that session ends. The route answers only a token it issued (404 otherwise); no request names a path,
a file or a module. It sits behind the server's Host/Origin rule (`app.http_guard`), which refuses a
foreign Host and a cross-site subresource before any handler runs.
"""
from __future__ import annotations

import asyncio
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tornado.web import RequestHandler

ROUTE = "/tlx-download/"
PATTERN = r"/tlx-download/([A-Za-z0-9_-]{43})"  # the route's only form: a token as `issue` makes them
CHUNK = 1 << 20  # bytes written per flush: the loop serves other sessions between chunks
CONTENT_TYPES = {".svg": "image/svg+xml", ".png": "image/png", ".zip": "application/zip",
                 ".json": "application/json"}


@dataclass(frozen=True)
class Download:
    """One export a page may fetch: its file name and the call that writes it (refusals raise, typed)."""

    filename: str
    produce: Callable[[], Path]


_ISSUED: dict[str, Download] = {}
_LOCK = threading.Lock()


def issue(download: Download) -> str:
    """A new token for `download`; its URL is `url(token)`."""
    token = secrets.token_urlsafe(32)  # 43 characters of [A-Za-z0-9_-]
    with _LOCK:
        _ISSUED[token] = download
    return token


def url(token: str) -> str:
    """The page-relative URL of a token's download (the page is served at the server's root)."""
    return ROUTE + token


def withdraw(token: str) -> None:
    """Forget a token: its URL answers 404 from now on."""
    with _LOCK:
        _ISSUED.pop(token, None)


def issued(token: str) -> Download | None:
    with _LOCK:
        return _ISSUED.get(token)


class DownloadHandler(RequestHandler):
    """Writes the export a token names (on a thread) and streams it as an attachment."""

    async def get(self, token: str) -> None:
        download = issued(token)
        if download is None:
            self._plain(404, "no such download (its page was closed or reloaded)")
            return
        try:
            path = await asyncio.to_thread(download.produce)
        except Exception as exc:  # noqa: BLE001 - the page's status line shows the refusal (produce says it)
            from .views.docsync import refusal_text

            self._plain(422, refusal_text(exc))
            return
        self.set_header("Content-Type", CONTENT_TYPES.get(Path(download.filename).suffix, "application/octet-stream"))
        self.set_header("Content-Disposition", f'attachment; filename="{download.filename}"')
        self.set_header("Content-Length", str(path.stat().st_size))
        self.set_header("Cache-Control", "no-store")
        with open(path, "rb") as f:
            while True:
                chunk = f.read(CHUNK)
                if not chunk:
                    break
                self.write(chunk)
                await self.flush()
        self.finish()

    def _plain(self, status: int, text: str) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(text + "\n")
