"""The `torchlens-explore` console script: summary, refusals, headless snapshot, and serving."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from app import cli

SCRIPT = Path(sys.executable).parent / "torchlens-explore"


def test_summary_of_gpt2_built_from_its_config(capsys):
    assert cli.main(["--summary", "gpt2"]) == 0
    out = capsys.readouterr().out
    assert "GPT2LMHeadModel" in out and "124,439,808" in out and "HYPOTHESIS" in out
    assert "GPT2Block x12" in out


def test_refusals_print_code_site_and_remedy_without_a_traceback(capsys, tmp_path):
    assert cli.main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "refused [source_not_found]" in err and "what to do:" in err and "Traceback" not in err
    assert cli.main(["--model", "tests.models:tiny_gpt2", "--input-shape", "1,zero"]) == 2
    assert "invalid_input_shape" in capsys.readouterr().err
    assert cli.main(["snapshot", "gpt2", "--out", str(tmp_path / "fig.txt")]) == 2


def test_snapshot_writes_a_valid_svg_with_the_ladder_caption(tmp_path, capsys):
    out = tmp_path / "fig.svg"
    assert cli.main(["snapshot", "gpt2", "--out", str(out), "--fold"]) == 0
    root = ET.parse(out).getroot()
    texts = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
    assert root.tag.endswith("svg") and "HYPOTHESIS" in texts and "x12" in texts
    assert "HYPOTHESIS" in capsys.readouterr().out


def test_browser_opens_only_where_there_is_a_display(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    if sys.platform.startswith("linux"):
        assert cli.browser_available() is False


@pytest.mark.slow
def test_console_script_serves_a_factory_model_on_loopback_and_prints_the_url():
    assert SCRIPT.exists(), "the console script is installed by `pip install -e .`"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([str(SCRIPT), "--model", "tests.models:tiny_gpt2", "--no-browser"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=env["PYTHONPATH"])
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            m = re.search(r"serving on (http://127\.0\.0\.1:\d+/)", line)
            url = m.group(1) if m else None
        assert url, "the URL was never printed"
        page = ""
        while time.monotonic() < deadline:  # the URL is printed just before the server answers
            try:
                page = urllib.request.urlopen(url, timeout=30).read().decode()
                break
            except OSError:
                time.sleep(0.2)
        assert "torchlens-explore" in page
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_console_script_opens_the_browser_where_there_is_one(tmp_path):
    """With a desktop session (DISPLAY) and a browser ($BROWSER), the URL it prints is the one it opens."""
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    # written whole, then renamed: the file exists only once it holds the URL (the test reads it then)
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}.part && mv {opened}.part {opened}\n')
    browser.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "DISPLAY": ":99",
           "BROWSER": str(browser)}
    proc = subprocess.Popen([str(SCRIPT), "--model", "tests.models:tiny_gpt2"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=env["PYTHONPATH"])
    try:
        deadline = time.monotonic() + 120
        url = _served_url(proc, deadline)
        while not opened.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert opened.read_text().strip() == url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _served_url(proc: subprocess.Popen, deadline: float) -> str:
    """The URL the console script prints once it serves (read from its output until `deadline`)."""
    while time.monotonic() < deadline:
        m = re.search(r"serving on (http://127\.0\.0\.1:\d+/)", proc.stdout.readline())
        if m:
            return m.group(1)
    raise AssertionError("the URL was never printed")


@pytest.mark.slow
@pytest.mark.browser
def test_session_folders_are_removed_when_the_server_is_stopped(tmp_path, page):
    """A page whose Export tab was opened makes the session's export folder (each side tab is built on its first
    showing); SIGTERM to the server removes it."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "TMPDIR": str(tmp_path)}
    log = tmp_path / "server.log"  # a file, not a pipe: a server whose unread pipe fills would block on a write
    with log.open("w") as out:
        proc = subprocess.Popen([str(SCRIPT), "--model", "tests.models:tiny_gpt2", "--no-browser"], stdout=out,
                                stderr=subprocess.STDOUT, text=True, env=env, cwd=env["PYTHONPATH"])
    try:
        deadline, url = time.monotonic() + 120, None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            m = re.search(r"serving on (http://127\.0\.0\.1:\d+/)", log.read_text())
            url = m.group(1) if m else time.sleep(0.2)
        assert url, f"the URL was never printed: {log.read_text()[-2000:]}"
        for _ in range(100):  # the URL is printed just before the server answers
            try:
                urllib.request.urlopen(url, timeout=30).read()
                break
            except OSError:
                time.sleep(0.2)
        page.goto(url)
        page.wait_for_selector(".tlx-tabs", state="attached", timeout=180_000)  # the capture runs after the URL answers
        page.locator(".bk-tab", has_text="Export").click()
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob("tlx-export-*")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p.name for p in tmp_path.glob("tlx-export-*")], "the session made no export folder"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=180)  # a hang guard
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"the server did not exit on SIGTERM; its output ends: {log.read_text()[-3000:]}")
    assert list(tmp_path.glob("tlx-*")) == []


def test_the_console_script_dispatches_export_html_and_snapshot_overlays(tmp_path):
    """`export-html` and `snapshot --overlay` are reachable from the one console entry point."""
    from app.cli import main

    page = tmp_path / "gpt2.html"
    assert main(["export-html", "gpt2", "--out", str(page)]) == 0
    assert page.stat().st_size > 10_000 and "<script" in page.read_text()
    fig = tmp_path / "gpt2.svg"
    assert main(["snapshot", "gpt2", "--out", str(fig), "--overlay", "flops", "--overlay-scale", "log"]) == 0
    plain = tmp_path / "plain.svg"
    assert main(["snapshot", "gpt2", "--out", str(plain)]) == 0
    assert fig.read_text() != plain.read_text()  # the overlay changed the fills and added a legend
    # activation statistics need saved values: a weights-free trace refuses typed (exit 2)
    assert main(["snapshot", "gpt2", "--out", str(fig), "--overlay", "act_mean"]) == 2
