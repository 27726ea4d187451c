"""Shared fixtures: small real architectures built from configs, and Chromium for Playwright; how the suite's
tests are shared between pytest-xdist workers."""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

ARTIFACTS = Path(os.environ.get("TLX_TEST_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"))

# The explorer's start-up cache (app/default_cache.py) of every launch in this process and the servers it
# starts lives in a folder of this run, removed at its end: a test run never writes the user's ~/.cache.
_CACHE_HOME = tempfile.mkdtemp(prefix="tlx-test-xdg-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE_HOME
atexit.register(shutil.rmtree, _CACHE_HOME, True)

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


# The zoo's sweeps: each case's tests share one sweep (a module-level cache), so a case is the unit a worker
# takes; a case's test ids are the case's own, or it followed by one of these variants.
SPLIT_BY_CASE = {"tests/zoo/test_zoo_nn.py": ("train", "train_no_grad", "eval", "eval_no_grad"),
                 "tests/zoo/test_zoo_transformers.py": ()}


def work_unit(nodeid: str) -> str:
    """What one pytest-xdist worker runs together: a test file (its module fixtures, servers and models made
    once, its tests in order), but a case of the zoo's two long sweeps, which would otherwise end the run alone."""
    path, _, rest = nodeid.partition("::")
    variants = SPLIT_BY_CASE.get(path)
    if variants is None or not rest.endswith("]") or "[" not in rest:
        return path
    case = rest[rest.index("[") + 1:-1]
    for variant in variants:
        if case.endswith(f"-{variant}"):
            case = case[: -len(variant) - 1]
            break
    return f"{path}::{case}"


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (pyproject.toml's addopts) shared out by `work_unit`. (pytest-xdist's own `loadgroup`
    marks cannot do it under pytest 9: it renames `item._nodeid`, which pytest 9's `nodeid` no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None  # another --dist asked for on the command line: pytest-xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)


# Playwright's `expect` waits 5 s by default for what it asserts, a window a busy host (two workers, a
# subprocess starting beside them) can miss while the page is right; the assertion is the same, only the
# wait for it is longer (an action's own wait is Playwright's 30 s).
EXPECT_TIMEOUT_MS = 30_000


# Every interpreter a run starts (the workers, and the 130 or so that the CLI, twin, worker and distributed
# tests spawn) imports the project's own packages. Where PYTHONDONTWRITEBYTECODE is set (this machine kind
# sets it) none of them writes a .pyc, so each compiles those sources again: about 0.35 s of CPU apiece.
# One compile at the start of the run, into the checkout's __pycache__ folders (ignored by git), serves them.
COMPILED = ("tracer", "app", "exporters", "tests")


def _compile_project(config) -> None:
    if not sys.dont_write_bytecode or hasattr(config, "workerinput"):  # a worker: the controller does it
        return
    root = Path(__file__).resolve().parent.parent
    job = subprocess.Popen([sys.executable, "-m", "compileall", "-q", *(str(root / d) for d in COMPILED)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    config.add_cleanup(lambda: (job.kill(), job.wait()))  # a run shorter than the compile leaves no process


def pytest_configure(config):
    _compile_project(config)
    try:
        from playwright.sync_api import expect
    except ImportError:  # the browser tests then fail on their own import, with their own message
        return
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """pytest-playwright launches Debian's Chromium (no browser download is possible here)."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("Debian's chromium is not installed: run the README's test command (it installs it)")
    return {**browser_type_launch_args, "executable_path": exe, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def seeded():
    torch.manual_seed(0)
    yield
