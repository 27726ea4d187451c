"""The app's hardening without a browser: export names and folders, zip caps, temp folders, value
statistics in chunks, declared limits, twin comparability before building, token ranges."""
from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from app import limits, tempdirs, twin
from app.state import ExplorerState
from app.views.export import ExportPanel, file_stem
from app.errors import LimitExceededError
from tracer.errors import DischargePreflightError, InvalidInputError, TracerError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_limits():
    """Install tight limits for one test, then put the defaults back."""
    before = limits.current()

    def install(**changes):
        limits.set_limits(limits.Limits().with_overrides(f"{k}={v}" for k, v in changes.items()))

    yield install
    limits.set_limits(before)


def _evil(loaded, model_class):
    evil = copy.copy(loaded)
    evil.trace = copy.copy(loaded.trace)
    evil.trace.model_class = model_class
    return evil


@pytest.mark.parametrize("model_class,stem", [
    ("../../../../tmp/x/NAME", "NAME"), ("/abs/dir/NAME", "NAME"), ("GPT2LMHeadModel", "GPT2LMHeadModel"),
    ("<img src=x onerror=alert(1)>", "img_src_x_onerror_alert_1"), ("..", "trace"), ("", "trace"),
    ("a\\b\\..\\NAME", "NAME"), ("pkg.mod.Model", "Model")])
def test_file_stem_is_a_plain_name(model_class, stem):
    assert file_stem(model_class) == stem


def _run(coroutine):
    """Await a download callback on a fresh thread: an earlier test (Playwright's sync API) may leave an
    event loop running on this one, where asyncio.run refuses."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@pytest.mark.parametrize("kind", ["relative", "absolute"])
def test_exports_stay_in_the_session_folder_and_remove_nothing_outside(tiny_loaded, tmp_path, kind):
    target = tmp_path / "victim"
    target.mkdir()
    (target / "NAME.trace").mkdir()
    (target / "NAME.trace" / "keep.txt").write_text("mine")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    evil = f"{'../' * 12}{str(target).lstrip('/')}/NAME" if kind == "relative" else f"{target}/NAME"
    panel = ExportPanel(state=ExplorerState(_evil(tiny_loaded, evil)))
    written = [Path(_run(d.callback())) for d in (panel.svg, panel.png, panel.trace_file, panel.me_json)]
    assert [p.name for p in written] == ["NAME.svg", "NAME.png", "NAME.trace.zip", "NAME.model-explorer.json"]
    assert all(p.parent == panel.workdir and p.stat().st_size > 0 for p in written)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert (target / "NAME.trace" / "keep.txt").read_text() == "mine"
    # no staging left: at most the overlays written beside a Model Explorer file made in a worker (above
    # 10,000 ops; a small trace's download is written in the server, the graph file alone)
    extra = {p.name for p in panel.workdir.iterdir()} - {p.name for p in written}
    assert all(re.fullmatch(r"NAME\.model-explorer\.\w+\.nodedata\.json", n) for n in extra), extra
    panel.close()
    assert not panel.workdir.exists()


def test_temp_folders_remove_only_their_own(tmp_path):
    mine = tempdirs.make("tlx-test-")
    assert mine in tempdirs.live()
    tempdirs.remove(tmp_path)  # not made here: left alone
    assert tmp_path.exists()
    tempdirs.remove(mine)
    assert not mine.exists() and mine not in tempdirs.live()
    with pytest.raises(InvalidInputError):
        tempdirs.inside(tmp_path, "../escape.svg")


def _python(script: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`script` run by a fresh interpreter of this checkout (its output captured)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_session_and_extraction_folders_are_gone_when_the_process_exits(tmp_path):
    """A process that made an export folder and opened a .trace.zip leaves no tlx-* folder behind."""
    script = ("import tempfile, pathlib, sys\n"
              "from app import tempdirs\n"
              "d = tempdirs.make('tlx-export-'); (d / 'x.svg').write_text('x')\n"
              "print(d)\n")
    done = _python(script)
    folder = Path(done.stdout.strip())
    assert folder.name.startswith("tlx-export-") and not folder.exists()


def test_the_exit_waits_for_a_writer_then_removes_its_folder_and_tells_it(tmp_path):
    """A thread writing into an app folder when the process exits (the Export tab's Model Explorer files when
    the server gets SIGTERM): the exit's clean-up waits for it to finish, then removes the folder (and the writer
    is refused `shutting_down` as it leaves). Before, the clean-up removed the folder at once, the writer's atomic writes made it
    again, and the interpreter's end stopped the daemon thread: the folder outlived the server (a fresh clone's
    test_session_folders_are_removed_when_the_server_is_stopped). The order is set by events, not by time."""
    script = ("import atexit, threading, time\n"
              "from app import tempdirs\n"
              "from app.errors import ShuttingDownError\n"
              "d = tempdirs.make('tlx-model-explorer-')\n"
              "inside, exiting = threading.Event(), threading.Event()\n"
              "atexit.register(exiting.set)  # registered after tempdirs: runs before its clean-up\n"
              "def writer():\n"
              "    try:\n"
              "        with tempdirs.writing(d):\n"
              "            inside.set(); exiting.wait()\n"
              "            time.sleep(0.3)  # still writing when the exit began\n"
              "            (d / 'graph.json').write_text('{}')\n"
              "            print('writer wrote', flush=True)\n"
              "    except ShuttingDownError as exc:  # told on leaving (the exit may end the process first)\n"
              "        print('writer refused', exc.code, flush=True)\n"
              "threading.Thread(target=writer, daemon=True).start()\n"
              "inside.wait()\n"
              "print(d, flush=True)\n")
    done = _python(script)
    lines = done.stdout.split("\n")
    folder = Path(lines[0])
    assert folder.name.startswith("tlx-model-explorer-") and not folder.exists(), done.stdout + done.stderr
    assert "writer wrote" in done.stdout, done.stdout + done.stderr  # the exit waited for it


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_zip_inputs_are_capped_and_their_folders_removed(tmp_path, small_limits):
    from app.sources import open_path, unzip_trace

    small_limits(zip_bytes=1 << 20, zip_members=4)
    bomb = _zip(tmp_path / "bomb.trace.zip", {"trace.json": b"\0" * (8 << 20)})
    assert bomb.stat().st_size < 100_000  # a small file that would extract to 8 MiB
    many = _zip(tmp_path / "many.trace.zip", {f"f{i}": b"x" for i in range(10)})
    before = set(tempdirs.live())
    for z, limit in ((bomb, "zip_bytes"), (many, "zip_members")):
        with pytest.raises(LimitExceededError) as info:
            unzip_trace(z)
        assert info.value.code == "limit_exceeded" and info.value.findings["limit"] == limit
    assert set(tempdirs.live()) == before
    junk = _zip(tmp_path / "junk.trace.zip", {"trace.json": b"{}"})
    with pytest.raises(TracerError):
        open_path(junk)
    assert set(tempdirs.live()) == before


def test_a_saved_zip_opens_and_leaves_no_extraction_folder(tiny_loaded, tmp_path):
    from app.sources import open_path
    from app.views.export import zip_trace

    before = set(tempdirs.live())
    z = zip_trace(tiny_loaded.trace, tmp_path / "t.trace.zip")
    again = open_path(z)
    assert len(again.trace.ops) == len(tiny_loaded.trace.ops) and set(tempdirs.live()) == before
    assert again.trace.values  # the values were read before the folder went away
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.trace.zip"]


def test_value_statistics_are_exact_across_chunks():
    from tracer.tensor_stats import tensor_stats

    gen = torch.Generator().manual_seed(1)
    v = torch.randn(1000, 37, generator=gen) * 3 + 1
    d = v.double()
    got = tensor_stats(v, chunk=97)
    whole = tensor_stats(v, chunk=10**9)
    assert all(got[k] == pytest.approx(whole[k], rel=1e-12) for k in got)
    assert got["mean"] == pytest.approx(d.mean().item(), rel=1e-12)
    assert got["std"] == pytest.approx(d.std().item(), rel=1e-12)
    assert got["min"] == d.min().item() and got["norm"] == pytest.approx(d.norm().item(), rel=1e-12)
    odd = tensor_stats(torch.tensor([1.0, float("inf"), 2.0]), chunk=2)
    assert odd["non_finite"] == 1 and odd["mean"] == 1.5


@pytest.mark.slow
def test_value_statistics_of_a_large_value_never_copy_it_whole():
    """Peak memory while reading a 512 MiB float32 value stays far below the 1 GiB a float64 copy takes."""
    script = ("import resource, torch\n"
              "from tracer.tensor_stats import tensor_stats\n"
              "v = torch.ones(128 * 2**20)\n"
              "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "tensor_stats(v)\n"
              "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)\n")
    done = _python(script, timeout=300)
    grew = int(done.stdout.strip().splitlines()[-1])
    assert grew < 256 * 2**20, f"peak memory grew by {grew / 2**20:.0f} MiB"


def test_limits_are_typed_and_overridable():
    assert limits.Limits().with_overrides(["layers=4096"]).layers == 4096
    with pytest.raises(InvalidInputError):
        limits.Limits().with_overrides(["nope=1"])
    with pytest.raises(InvalidInputError):
        limits.Limits().with_overrides(["layers=-1"])
    with pytest.raises(LimitExceededError) as info:
        limits.Limits().check("layers", 100_000, "n_layer", "config")
    assert "--limit layers=100000" in info.value.remedy


def test_a_100000_layer_config_is_refused_before_anything_is_built(tmp_path, gpt2_loaded):
    import time

    cfg = tmp_path / "deep.json"
    cfg.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64,
                               "n_layer": 100_000, "n_head": 4, "vocab_size": 100}))
    started = time.perf_counter()
    with pytest.raises(LimitExceededError):
        twin.estimate(twin.TwinSpec(config=str(cfg)), gpt2_loaded.trace)
    with pytest.raises(LimitExceededError):
        twin.preflight(twin.TwinSpec(config=str(cfg)), gpt2_loaded.trace)
    print(f"refused in {time.perf_counter() - started:.3f} s")


def test_another_config_is_refused_before_the_twin_is_built(gpt2_loaded, monkeypatch):
    def never(*_a, **_k):
        raise AssertionError("the twin was built")

    monkeypatch.setattr(twin, "build_twin", never)
    structure = copy.copy(gpt2_loaded.trace)
    _, attn = twin.structure_defaults(structure)
    for spec, field in ((twin.TwinSpec(config="bert-base", attn=attn), "model_class"),
                        (twin.TwinSpec(config="gpt2", attn=attn, input_shape="1,9"), "inputs")):
        with pytest.raises(DischargePreflightError) as info:
            twin.discharge(structure, spec, lambda f, s: None)
        assert field in {m["field"] for m in info.value.findings["mismatches"]}
    assert structure.ladder_state == "HYPOTHESIS"


def test_the_estimate_follows_the_twins_input_shape(gpt2_loaded):
    _, attn = twin.structure_defaults(gpt2_loaded.trace)
    short = twin.estimate(twin.TwinSpec(config="gpt2", attn=attn, input_shape="1,8"), gpt2_loaded.trace)
    long = twin.estimate(twin.TwinSpec(config="gpt2", attn=attn, input_shape="4,8"), gpt2_loaded.trace)
    assert short.params == long.params == gpt2_loaded.trace.param_count()
    assert long.activation_bytes == pytest.approx(4 * short.activation_bytes, rel=1e-6)


def test_out_of_range_token_ids_are_a_typed_refusal():
    with pytest.raises(InvalidInputError) as info:
        twin.twin_inputs(twin.TwinSpec(config="gpt2", ids="1, 2, 99999999"))
    assert info.value.code == "token_id_out_of_range" and "50256" in info.value.remedy
    with pytest.raises(InvalidInputError):
        twin.twin_inputs(twin.TwinSpec(config="gpt2", ids="-3"))


def test_twin_weights_do_not_reseed_the_global_generator():
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    twin.build_twin(twin.TwinSpec(config=str(_tiny_config()), seed=7))
    twin.twin_inputs(twin.TwinSpec(config="gpt2", seed=7))
    assert torch.equal(torch.rand(3), expected)


def _tiny_config() -> Path:
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="tlx-test-cfg-"))
    path = folder / "tiny.json"
    path.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 32, "n_layer": 1,
                                "n_head": 4, "n_positions": 32, "vocab_size": 50}))
    return path


def test_a_cancelled_job_stops_at_its_next_step_and_its_result_is_dropped():
    import threading

    from app.views.docsync import BackgroundJob

    seen, results = [], []
    started, release = threading.Event(), threading.Event()

    def work(report):
        report(0.1, "first")
        started.set()
        release.wait(10)
        report(0.5, "second")  # raises: the job was cancelled meanwhile
        return "finished"

    job = BackgroundJob(None, lambda f, text: seen.append(text))
    thread = job.start(work, results.append, results.append)
    assert job.start(work, results.append, results.append) is None  # one run at a time
    started.wait(10)
    assert job.cancel() and not job.busy
    release.set()
    thread.join(10)
    assert seen == ["first"] and results == []
    again = job.start(lambda report: "next", results.append, results.append)
    again.join(10)
    assert results == ["next"]


@pytest.mark.parametrize("delay_ms", [0, 5])
def test_work_on_a_thread_reaches_a_served_document_through_its_loop_thread_only(delay_ms):
    """A Bokeh document is not thread-safe: a result from a thread is handed to the serving loop, and only the
    loop's thread puts the callback on the document (from the worker thread, a callback added while the loop
    released a hold of the document was lost under load, and the doctor's rows never showed)."""
    import threading

    from tornado.ioloop import IOLoop

    from app.views.docsync import call_on_document
    from tests.app.conftest import served_document

    started, box = threading.Event(), []

    def serve_loop() -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())
        box.append(IOLoop.current())
        started.set()
        box[0].start()

    loop_thread = threading.Thread(target=serve_loop, daemon=True)
    loop_thread.start()
    assert started.wait(10)
    loop = box[0]
    doc = served_document()
    doc._tlx_test_context.server_context = type("Server", (), {"application_context": type("App", (), {"io_loop": loop})})
    touched, ran = [], threading.Event()

    def add(callback, *delay):
        touched.append((threading.current_thread(), delay))
        callback()

    doc.add_next_tick_callback = add
    doc.add_timeout_callback = add
    try:
        worker = threading.Thread(target=lambda: call_on_document(doc, ran.set, delay_ms=delay_ms))
        worker.start()
        worker.join(10)
        assert ran.wait(10)
        assert touched == [(loop_thread, (delay_ms,) if delay_ms else ())]
        doc._tlx_test_context.destroyed = True  # a page closed meanwhile: its document is left alone
        worker = threading.Thread(target=lambda: call_on_document(doc, ran.clear))
        worker.start()
        worker.join(10)
        done = threading.Event()
        loop.add_callback(done.set)  # after the hop above, if there was one
        assert done.wait(10) and ran.is_set() and len(touched) == 1
    finally:
        loop.add_callback(loop.stop)
        loop_thread.join(10)
