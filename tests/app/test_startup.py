"""Start-up (issue 36 item 1): the server answers first, a page lists the stages while the capture runs,
and the explorer takes its place; a refusal found after the server started is shown and printed.

The order of events is asserted, never a time: the background load waits on an event the test sets
once it has seen the progress page. Real parts: a real model traced, a real server, Chromium.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from app.errors import InvalidModelSpecError
from app.startup import ROUTE_STAGES, Startup, refusal_lines
from tests.app import pagekit

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "torchlens-explore"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_stages_are_timed_in_the_order_entered_and_the_outcome_is_kept():
    clock = Clock()
    gate = threading.Event()

    def load(step):
        step("import")
        clock.now = 2.0
        step("model")
        gate.wait(30)
        clock.now = 5.0
        return "loaded"

    startup = Startup(load, ROUTE_STAGES["config"], clock=clock)
    startup.start()
    deadline = time.monotonic() + 30
    while startup.snapshot().current != "model" and time.monotonic() < deadline:
        time.sleep(0.01)
    snap = startup.snapshot()
    assert snap.current == "model" and not snap.done
    assert [k for k, _ in snap.stages] == ["import", "model", "capture", "layout"]
    assert dict(snap.stages)["import"] == 2.0 and dict(snap.stages)["capture"] is None
    gate.set()
    assert startup.wait(30)
    snap = startup.snapshot()
    assert snap.done and snap.loaded == "loaded" and snap.current is None
    assert dict(snap.stages)["model"] == 3.0
    assert snap.events == ("stage:import", "stage:model", "ready")
    assert startup.exit_code() == 0


def test_a_refusal_is_kept_typed_and_a_bug_is_not_a_refusal():
    def refuse(step):
        step("import")
        raise InvalidModelSpecError("--model 'x' is not module:factory", site="--model")

    refused = Startup(refuse, ROUTE_STAGES["factory"])
    refused.start()
    assert refused.wait(30) and refused.exit_code() == 2
    assert refused.snapshot().events[-1] == "refused"
    assert refusal_lines(refused.error)[0].startswith("torchlens-explore: refused [invalid_model_spec]")
    broken = Startup(lambda step: 1 / 0, ROUTE_STAGES["factory"])
    broken.start()
    assert broken.wait(30) and broken.exit_code() == 1
    assert "failed unexpectedly (ZeroDivisionError" in refusal_lines(broken.error)[0]


def _serve(startup, explorer_page):
    from app.progress import serve_startup
    from app.serving import free_loopback_port

    port = free_loopback_port()
    server = serve_startup(startup, "a tiny Llama", explorer_page, port, threaded=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url + "liveness", timeout=5)
            return server, url
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.browser
def test_the_progress_page_comes_first_and_the_graph_replaces_it(page):
    from app.explorer import PagePool, PageParts, build_app
    from app.factory import open_factory

    gate = threading.Event()
    pools = []

    def load(step):
        step("import")
        gate.wait(120)  # until the test has seen the progress page
        step("factory")
        loaded = open_factory("tests.models:tiny_llama")
        step("layout")
        pools.append(PagePool(loaded, ready=PageParts(loaded)))
        return loaded

    startup = Startup(load, ROUTE_STAGES["factory"])
    server, url = _serve(startup, lambda loaded: build_app(loaded, pools[0]))
    try:
        page.goto(url)
        progress = page.locator(".tlx-progress")
        expect(progress).to_be_visible(timeout=60_000)
        assert progress.get_attribute("data-stage") == "import"
        expect(progress.locator("li.now")).to_contain_text("importing torch")
        expect(progress.locator("li.later")).to_have_count(2)  # the model, the layout: still to come
        assert page.locator(".tlx-page").count() == 0 and not startup.done
        gate.set()
        pagekit.wait_graph(page, timeout_ms=120_000)
        expect(page.locator(".tlx-page")).to_be_visible()
        assert page.locator(".tlx-progress").count() == 0  # replaced, not stacked
        assert any(n["kind"] == "module" for n in pagekit.nodes(page))
        assert startup.snapshot().events == ("stage:import", "stage:factory", "stage:layout", "ready")
        later = page.context.new_page()  # a session opened after start-up gets the explorer at once
        later.goto(url)
        pagekit.wait_graph(later, timeout_ms=60_000)
        expect(later).to_have_title("torchlens-explore: LlamaForCausalLM")
        assert later.locator(".tlx-progress").count() == 0 and later.locator(".tlx-startup").count() == 0
        later.close()
    finally:
        gate.set()
        server.stop()


@pytest.mark.browser
def test_a_refusal_during_start_up_replaces_the_progress_on_the_page(page):
    from app.factory import open_factory

    gate = threading.Event()

    def load(step):
        step("import")
        gate.wait(120)
        step("factory")
        return open_factory("no_such_module_xyz:make")  # a real typed refusal (invalid_model_spec)

    startup = Startup(load, ROUTE_STAGES["factory"])
    server, url = _serve(startup, lambda loaded: pytest.fail("no explorer for a refusal"))
    try:
        page.goto(url)
        expect(page.locator(".tlx-progress")).to_be_visible(timeout=60_000)
        assert page.locator(".tlx-refusal").count() == 0
        gate.set()
        refusal = page.locator(".tlx-refusal")
        expect(refusal).to_contain_text("refused [invalid_model_spec]", timeout=60_000)
        expect(refusal).to_contain_text("at: --model")
        assert page.locator(".tlx-progress").get_attribute("data-stage") == "refused"
        assert page.locator(".tlx-page").count() == 0
    finally:
        gate.set()
        server.stop()


@pytest.mark.slow
def test_the_command_serves_first_then_prints_a_refusal_found_in_the_capture_and_exits_2(tmp_path):
    """A config whose values pass the checks before serving but that transformers cannot build: the URL is
    printed (and answers) before the refusal, the refusal is printed typed, and the command exits 2."""
    bad = tmp_path / "unknown_type.json"
    bad.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "no-such-model", "n_embd": 64,
                               "n_layer": 2, "n_head": 4, "n_positions": 64, "vocab_size": 100}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TLX_DEBUG", None)
    log = tmp_path / "out.log"
    with log.open("w") as out:
        proc = subprocess.Popen([str(SCRIPT), str(bad), "--no-browser"], stdout=out, stderr=subprocess.STDOUT, text=True,
                                env=env, cwd=tmp_path)
    try:
        code = proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the command did not exit after its refusal: {log.read_text()[-2000:]}")
    text = log.read_text()
    assert code == 2, text
    assert "Traceback" not in text
    served = re.search(r"serving on http://127\.0\.0\.1:\d+/", text)
    refused = re.search(r"refused \[config_invalid\]", text)
    assert served and refused and served.start() < refused.start(), text
    assert "what to do:" in text
