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
def test_a_session_no_browser_connected_to_builds_no_explorer(page):
    """A bare GET of the URL (a script polling it) makes a session that never connects: it must neither build an
    explorer nor take the page built ahead; the browser's session gets the one build."""
    from app.explorer import PagePool, PageParts, build_app
    from app.factory import open_factory

    gate = threading.Event()
    pools, built = [], []

    def load(step):
        step("import")
        gate.wait(120)
        step("factory")
        loaded = open_factory("tests.models:tiny_llama")
        step("layout")
        pools.append(PagePool(loaded, ready=PageParts(loaded)))
        return loaded

    def explorer_page(loaded):
        built.append(pools[0]._ready is not None)  # whether the parts built ahead were still there to take
        return build_app(loaded, pools[0])

    startup = Startup(load, ROUTE_STAGES["factory"])
    server, url = _serve(startup, explorer_page)
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:  # a session is made; no websocket follows
            assert answer.status == 200
        page.goto(url)
        expect(page.locator(".tlx-progress")).to_be_visible(timeout=60_000)
        gate.set()
        pagekit.wait_graph(page, timeout_ms=120_000)
        time.sleep(1.0)  # several ticks (POLL_MS) of the bare session after the browser's page was built
        assert built == [True], built
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


SHORT_LINGER = "import sys; import app.cli as cli; cli.REFUSAL_LINGER_S = 1.0; sys.exit(cli.main())"


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
        # the console entry point with the page's linger after a refusal (15 s) cut to 1 s: what is tested is
        # the order (URL first, then the typed refusal) and the exit status, not how long the page stays up
        proc = subprocess.Popen([sys.executable, "-c", SHORT_LINGER, str(bad), "--no-browser"], stdout=out,
                                stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
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


# -- the start-up cache of the embedded default (app.default_cache) ------------------------------------------

@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "torchlens-explore"


def _open(fresh=False):
    from app.default_cache import open_default

    steps = []
    return open_default((1, 8), steps.append, fresh=fresh), steps


def test_a_cached_start_yields_the_same_trace_as_a_fresh_capture_and_says_so(cache_home):
    from app.default_cache import CachedDefault, present
    from tracer.claims.seal import structure_digest

    assert not present((1, 8))
    first, steps = _open()
    assert not isinstance(first.loaded, CachedDefault) and "no cached entry yet" in first.note
    assert steps == ["import", "model", "capture"] and present((1, 8))
    assert [p.name for p in cache_home.iterdir()] == [first.note.rsplit("/", 1)[1]]
    second, steps = _open()
    cached = second.loaded
    assert isinstance(cached, CachedDefault) and steps == ["import-tracer", "cache"]
    assert structure_digest(cached.trace, fresh=True) == structure_digest(first.loaded.trace, fresh=True)
    assert cached.trace.ladder_state == first.loaded.trace.ladder_state == "HYPOTHESIS"
    assert cached.trace.provenance.config_source == first.loaded.trace.provenance.config_source
    assert "read from the start-up cache: the same capture" in cached.title  # disclosed on the page
    assert cached.config_path == first.loaded.config_path and cached.input_shape == (1, 8)
    assert type(cached.model).__name__ == type(first.loaded.model).__name__ == "LlamaForCausalLM"
    assert cached.inputs[0].device.type == "meta" and tuple(cached.inputs[0].shape) == (1, 8)
    again, _ = _open(fresh=True)  # --fresh captures again and replaces the entry
    assert not isinstance(again.loaded, CachedDefault) and "--fresh" in again.note


def _entry(cache_home):
    (folder,) = [p for p in cache_home.iterdir() if p.name.startswith("default-")]
    return folder


def _flip_a_byte(path):
    raw = bytearray(path.read_bytes())
    middle = len(raw) // 2
    raw[middle] = ord("x") if raw[middle] != ord("x") else ord("y")
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage", ["trace-bytes", "entry-key", "entry-json", "recorded-versions"])
def test_a_corrupted_or_mismatched_entry_is_rebuilt_not_trusted(cache_home, damage):
    from app.default_cache import CachedDefault, entry_key, read, write
    from tracer.claims.seal import structure_digest

    first, _ = _open()
    folder = _entry(cache_home)
    if damage == "trace-bytes":
        _flip_a_byte(folder / "trace" / "trace.json")
        expected = "the saved trace is refused"
    elif damage == "entry-key":
        entry = json.loads((folder / "entry.json").read_text())
        entry["key"]["torch"] = "0.0.1"
        (folder / "entry.json").write_text(json.dumps(entry))
        expected = "names another key"
    elif damage == "entry-json":
        (folder / "entry.json").write_text("{not json")
        expected = "entry.json is unreadable"
    else:  # a trace captured under other versions, filed under this key
        prov = first.loaded.trace.provenance
        write(entry_key(), first.loaded.trace.with_provenance(versions={**prov.versions, "torch": "0.0.1"}))
        expected = "captured under torch 0.0.1"
    assert expected in read(entry_key()).reason
    rebuilt, steps = _open()
    assert not isinstance(rebuilt.loaded, CachedDefault), rebuilt.note
    assert "the cached entry was not used: " in rebuilt.note and expected in rebuilt.note
    assert steps[:2] == ["import-tracer", "cache"] and "capture" in steps
    then, _ = _open()  # the rebuilt entry holds
    assert isinstance(then.loaded, CachedDefault)
    assert structure_digest(then.loaded.trace, fresh=True) == structure_digest(first.loaded.trace, fresh=True)


def test_entries_of_other_keys_are_pruned_to_the_newest(cache_home):
    from app.default_cache import KEPT_ENTRIES, entry_folder, entry_key, read, write

    first, _ = _open()
    trace = first.loaded.trace
    key = entry_key()
    for n in range(KEPT_ENTRIES + 1):  # as if other checkouts or versions had written theirs
        write({**key, "package": f"other-{n}"}, trace)
    names = sorted(p.name for p in cache_home.iterdir())
    assert len(names) == KEPT_ENTRIES and entry_folder({**key, "package": f"other-{KEPT_ENTRIES}"}).name in names
    assert entry_folder(key).name not in names and read(key).trace is None  # the oldest went first
