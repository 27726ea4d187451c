"""The real Model Explorer server on an exported graph: health, read-back, URL, stop; and Chromium."""
from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

import pytest
import torch

import tracer
from exporters import model_explorer as me
from tests.models import tiny_gpt2
from exporters.errors import ModelExplorerServerError, NonLoopbackHostError

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str) -> str:
    with _NO_PROXY.open(url, timeout=10) as resp:
        return resp.read().decode("utf-8")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, dict]:
    trace = tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 8)),))
    path = me.export(trace, tmp_path_factory.mktemp("me") / "gpt2.json")
    return path, me.export_node_data(trace, path)


@pytest.mark.slow
def test_serve_reads_back_the_file_and_stops(exported):
    path, node_data = exported
    server = me.serve(path, node_data=list(node_data.values()))
    with server as url:
        parsed = urlparse(url)
        assert parsed.hostname == "127.0.0.1" and parsed.port == server.port
        data = json.loads(parse_qs(parsed.query)["data"][0])
        assert data["models"] == [{"url": str(path.resolve())}]
        assert data["nodeData"] == [str(p.resolve()) for p in node_data.values()]
        assert _get(f"{server.base_url}/check_health") == "model_explorer_ok"
        served = json.loads(_get(f"{server.base_url}/api/v1/read_text_file?path={quote(str(path))}"))
        assert served["content"] == path.read_text(encoding="utf-8")
        assert "<html" in _get(server.base_url + "/").lower()
        proc = server.process
    assert server.process is None and proc.poll() is not None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()


def test_serve_refuses_non_loopback_hosts(exported):
    path, _ = exported
    with pytest.raises(NonLoopbackHostError) as info:
        me.serve(path, host="0.0.0.0")
    assert info.value.code == "non_loopback_host_refused" and info.value.remedy


def test_serve_refuses_a_missing_file(tmp_path):
    with pytest.raises(ModelExplorerServerError) as info:
        me.serve(tmp_path / "nope.json")
    assert info.value.code == "model_explorer_server_failed"


@pytest.mark.slow
def test_serve_on_a_busy_port_fails_typed(exported):
    path, _ = exported
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ModelExplorerServerError) as info:
            me.serve(path, port=port, timeout=30)
    assert "already in use" in info.value.findings["log"]


@pytest.mark.slow
@pytest.mark.browser
def test_chromium_finds_a_node_and_shows_the_overlay(exported, page, artifacts_dir):
    path, node_data = exported
    trace_flops = json.loads(node_data["flops"].read_text())
    addmm_flops = next(iter(trace_flops.values()))["results"]["addmm_1"]["value"]
    server = me.serve(path, node_data=list(node_data.values()))
    with server as url:
        page.set_viewport_size({"width": 1400, "height": 900})
        # 1) the graph alone: find addmm_1 by name; locating it expands transformer/h/0/attn/c_attn
        page.goto(me.open_url(server.base_url, path))
        _locate(page, "addmm_1")
        page.screenshot(path=str(artifacts_dir / "model_explorer_gpt2_addmm_1.png"))
        page.get_by_text("transformer.h.0.attn.c_attn", exact=True).filter(visible=True).first.wait_for(timeout=30_000)
        page.wait_for_timeout(500)
        page.screenshot(path=str(artifacts_dir / "model_explorer_gpt2_addmm_1.png"))
        info = page.locator("body").inner_text()
        # 2) the graph with the node-data overlay (claim state, FLOPs, bytes, parameters)
        second = page.context.new_page()
        second.set_viewport_size({"width": 1400, "height": 900})
        second.goto(url)
        _locate(second, "addmm_1")
        second.wait_for_function("t => document.body.innerText.includes(t)", arg=str(addmm_flops), timeout=60_000)
        second.wait_for_timeout(500)
        second.screenshot(path=str(artifacts_dir / "model_explorer_gpt2_node_data.png"))
        overlay = second.locator("body").inner_text()
    assert "GPT2LMHeadModel [OBSERVED]" in info and "GPT2LMHeadModel · OBSERVED" in info
    assert "Conv1D" in info and "claim_state" in info
    assert "transformer (GPT2Model)/h (ModuleList)/0 (GPT2Block)/attn (GPT2Attention)/c_attn (Conv1D)" in info  # its namespace
    assert addmm_flops > 0 and str(addmm_flops) in overlay and "OBSERVED" in overlay


def _locate(page, name: str) -> None:
    """Search a node by name and Alt+click the hit (Model Explorer expands its layers and selects it)."""
    search = page.get_by_placeholder("Search nodes/layers by regex")
    search.wait_for(timeout=60_000)
    page.get_by_text("109 nodes").first.wait_for(timeout=60_000)
    search.fill(f"^{name}$")
    hit = page.get_by_text(name, exact=True).filter(visible=True)
    hit.first.wait_for(timeout=30_000)
    hit.first.click(modifiers=["Alt"])


def _raw_get(port: int, path: str, host: str | None = None, method: str = "GET") -> tuple[int, str]:
    """One HTTP request with an explicit Host header (what a rebinding page would send)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True)
        conn.putheader("Host", host or f"127.0.0.1:{port}")
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


@pytest.mark.slow
def test_the_front_serves_only_the_exported_files_to_the_right_host(exported, monkeypatch):
    """Through the front: the graph is served, /etc/passwd is not, a foreign Host is refused, the page loads,
    and the real server runs without the app's environment."""
    path, node_data = exported
    monkeypatch.setenv("TLX_TEST_SECRET", "do-not-leak")
    server = me.serve(path, node_data=list(node_data.values()))
    with server:
        port = server.port
        status, body = _raw_get(port, f"/api/v1/read_text_file?path={quote(str(path))}")
        assert status == 200 and json.loads(body)["content"] == path.read_text(encoding="utf-8")
        for bad in ("/etc/passwd", "/proc/self/environ", f"{path.parent}/../{path.parent.name}/nope.json",
                    f"{path}&path=/etc/passwd"):
            status, body = _raw_get(port, f"/api/v1/read_text_file?path={quote(bad)}")
            assert status == 403 and "root:" not in body and "do-not-leak" not in body
        status, _ = _raw_get(port, "/api/v1/read_text_file?path=" + quote("/etc/passwd") + "&path=" + quote(str(path)))
        assert status == 403
        for host in ("evil.example:%d" % port, "127.0.0.1", "localhost:1", "127.0.0.1.nip.io:%d" % port):
            status, body = _raw_get(port, "/", host=host)
            assert status == 421 and "<html" not in body.lower()
        assert _raw_get(port, "/", host=f"localhost:{port}")[0] == 200
        status, page = _raw_get(port, "/")
        assert status == 200 and "<html" in page.lower()
        for hidden in ("/api/v1/send_command?json=%7B%7D", "/%61pi/v1/send_command?json=%7B%7D",
                       "//api/v1/send_command?json=%7B%7D", "/%2Fapi/v1/send_command", "/x/../api/v1/send_command",
                       "/%61pi/v1/read_text_file?path=/etc/passwd"):
            status, body = _raw_get(port, hidden)
            assert status in (403, 404) and "root:" not in body, hidden
        assert _raw_get(port, "/apipost/v1/upload", method="POST")[0] == 405
        assert _raw_get(port, "/api/v1/check_new_version")[0] == 200
        environ = Path(f"/proc/{server.process.pid}/environ").read_bytes()
        assert b"do-not-leak" not in environ and b"HOME=" in environ
