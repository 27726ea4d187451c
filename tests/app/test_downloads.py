"""The explorer's download route (app/downloads.py) on a real server in this process: a token it issued is
written on a thread and streamed as an attachment; an unknown or withdrawn token is 404, a refusal 422 with
its text, a foreign Host 421 (the server's Host rule comes first)."""
from __future__ import annotations

import http.client
from pathlib import Path

import pytest

from app import downloads
from tracer.errors import InvalidInputError


@pytest.fixture(scope="module")
def port(tiny_module_loaded):
    from urllib.parse import urlsplit

    from tests.app.conftest import served

    with served(tiny_module_loaded) as url:
        yield urlsplit(url).port


@pytest.fixture(scope="module")
def tiny_module_loaded():
    from app.factory import open_factory

    return open_factory("tests.models:tiny_llama")


def _get(port: int, path: str, host: str | None = None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={"Host": host or f"127.0.0.1:{port}"})
    answer = conn.getresponse()
    body = answer.read()
    conn.close()
    return answer.status, {k.lower(): v for k, v in answer.getheaders()}, body


def test_an_issued_download_is_written_when_fetched_and_streamed_as_an_attachment(port, tmp_path):
    payload = b'{"graphs": []}' * 200_000  # 2.8 MB: more than one chunk
    written = []

    def produce() -> Path:
        path = tmp_path / "m.model-explorer.json"
        path.write_bytes(payload)
        written.append(path)
        return path

    token = downloads.issue(downloads.Download("m.model-explorer.json", produce))
    try:
        assert not written  # nothing is written before the link is followed
        status, headers, body = _get(port, downloads.url(token))
        assert status == 200 and body == payload and len(written) == 1
        assert headers["content-type"] == "application/json"
        assert headers["content-disposition"] == 'attachment; filename="m.model-explorer.json"'
        assert headers["cache-control"] == "no-store" and "content-security-policy" in headers
        assert _get(port, downloads.url(token), host="rebound.example:80")[0] == 421  # the Host rule first
    finally:
        downloads.withdraw(token)
    assert _get(port, downloads.url(token))[0] == 404  # withdrawn


def test_an_unknown_token_is_404_and_a_path_is_never_a_route(port):
    assert _get(port, downloads.url("A" * 43))[0] == 404
    status, _h, _b = _get(port, "/tlx-download/..%2F..%2Fetc%2Fpasswd")
    assert status == 404


def test_a_refused_export_answers_422_with_the_refusal(port):
    def produce() -> Path:
        raise InvalidInputError("no export for this view", site="export", remedy="Pick another view.")

    token = downloads.issue(downloads.Download("x.svg", produce))
    try:
        status, headers, body = _get(port, downloads.url(token))
    finally:
        downloads.withdraw(token)
    assert status == 422 and headers["content-type"].startswith("text/plain")
    assert b"no export for this view" in body and b"Pick another view." in body


def test_a_served_export_panel_writes_the_model_explorer_json_ahead_and_its_link_streams_that_file(monkeypatch):
    """The Export tab of a served page writes the JSON on a thread at once; the first click on the link takes
    that file (one export in all), a later click or another envelope writes anew."""
    from app.factory import open_factory
    from app.state import ExplorerState
    from app.views import export

    calls = []
    real = export.export_for_download
    monkeypatch.setattr(export, "export_for_download", lambda *a: calls.append(a[2]) or real(*a))

    from tests.app.conftest import served_document

    state = ExplorerState(open_factory("tests.models:tiny_llama"))
    state.document = served_document()
    panel = export.ExportPanel(state=state)
    try:
        [(key, ahead)] = [(k, f) for k, (_t, f) in panel._ahead.items()]
        assert key == "model-explorer"
        written = ahead.result(timeout=60)
        token = next(t for t in panel._tokens if downloads.issued(t).filename.endswith(".model-explorer.json"))
        assert downloads.issued(token).produce() == written and calls == ["model-explorer"]  # the file written ahead
        downloads.issued(token).produce()
        assert calls == ["model-explorer", "model-explorer"]  # a second click writes anew
        panel._write_ahead(written.name, "model-explorer")
        panel._ahead["model-explorer"][1].result(timeout=60)
        state.trace = state.trace.with_envelope(state.trace.envelope)  # a new Trace: same graph and envelope
        downloads.issued(token).produce()
        assert calls == ["model-explorer"] * 3  # ... so the file written ahead served it
    finally:
        panel.close()
    assert all(downloads.issued(t) is None for t in panel._tokens)
