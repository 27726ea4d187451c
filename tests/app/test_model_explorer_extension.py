"""[issue 15] The Model Explorer adapter extension: a saved trace opens in Model Explorer itself.

The real `model-explorer` command is started on loopback with `--extensions=app.model_explorer_extension`,
as a user would; the graph and an overlay are read back over HTTP through the vendor's own command route.
"""
from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
import torch
from torch import nn

import tracer
from app.model_explorer_extension.main import ADAPTER_ID, OVERLAYS_ID
from app.views.export import zip_trace
from exporters.model_explorer.check import rebuild_with_graph_builder
from exporters.model_explorer.payload import node_data, to_graph_collection
from exporters.model_explorer.server import _command, free_port, minimal_environment

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    home = tmp_path_factory.mktemp("me-home")
    proc = subprocess.Popen([*_command(), "--extensions=app.model_explorer_extension", "--host", "127.0.0.1",
                             "--port", str(port), "--no_open_in_browser"], cwd=ROOT, env=minimal_environment(str(home)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{base}/check_health", timeout=1).read() == b"model_explorer_ok":
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"model-explorer did not start: {proc.communicate(timeout=5)[0].decode()[-2000:]}")
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _command_json(base: str, cmd: dict) -> dict:
    return json.loads(urllib.request.urlopen(f"{base}/api/v1/send_command?json={quote(json.dumps(cmd))}", timeout=60).read())


def _convert(base: str, path: Path) -> dict:
    return _command_json(base, {"cmdId": "convert", "extensionId": ADAPTER_ID, "modelPath": str(path), "settings": {},
                                "deleteAfterConversion": False})


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.GELU()), nn.Linear(8, 2))
    trace = tracer.trace(model, (torch.randn(2, 4),))
    folder = tmp_path_factory.mktemp("traces") / "mlp.trace"
    trace.save(str(folder))
    return trace, folder, zip_trace(trace, folder.with_suffix(".trace.zip"))


def test_the_extension_is_listed_by_the_server(server):
    listed = {e["id"]: e for e in json.loads(urllib.request.urlopen(f"{server}/api/v1/get_extensions").read())}
    assert listed[ADAPTER_ID]["type"] == "adapter" and "zip" in listed[ADAPTER_ID]["fileExts"]
    assert listed[OVERLAYS_ID]["type"] == "node_data_provider"


@pytest.mark.parametrize("which", ["folder", "zip"])
def test_a_saved_trace_converts_to_the_exporters_graph(server, saved, which):
    trace, folder, zipped = saved
    got = _convert(server, folder if which == "folder" else zipped)
    assert "error" not in got, got
    (collection,) = got["graphCollections"]
    expected = rebuild_with_graph_builder(to_graph_collection(trace))
    # The server serializes the vendor dataclasses with every optional field; compare what the exporter wrote.
    (graph,) = collection["graphs"]
    assert graph["id"] == expected["graphs"][0]["id"]
    assert [n["id"] for n in graph["nodes"]] == [n["id"] for n in expected["graphs"][0]["nodes"]]
    assert {n["namespace"] for n in graph["nodes"]} == {n["namespace"] for n in expected["graphs"][0]["nodes"]}
    assert graph["groupNodeAttributes"]["2 (Sequential)"]["class"] == "Sequential"  # layers named with their class


def test_an_overlay_comes_back_as_node_data(server, saved):
    trace, folder, _ = saved
    got = _command_json(server, {"cmdId": "run", "extensionId": OVERLAYS_ID, "modelPath": str(folder),
                                 "graphId": "g", "configValues": {"metric": "parameters"}})
    assert got.get("error") == "", got
    expected = next(iter(node_data(trace, "parameters").values()))["results"]
    assert {k: v["value"] for k, v in got["result"]["results"].items()} == {k: v["value"] for k, v in expected.items()}
    editors = _command_json(server, {"cmdId": "get_config_editors", "extensionId": OVERLAYS_ID})
    assert "parameters" in [o["value"] for o in editors["configEditors"][0]["options"]]


def test_a_corrupt_file_is_refused_as_text_not_a_crash(server, tmp_path):
    bad = tmp_path / "bad.trace.zip"
    bad.write_bytes(b"not a zip")
    got = _convert(server, bad)
    assert "trace_file_corrupt" in got.get("error", "") or "not a zip" in got.get("error", "")
    overlay = _command_json(server, {"cmdId": "run", "extensionId": OVERLAYS_ID, "modelPath": str(bad),
                                     "graphId": "g", "configValues": {"metric": "parameters"}})
    assert "not a zip" in overlay["error"]
