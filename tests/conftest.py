"""Shared fixtures: small real architectures built from configs, and Chromium for Playwright."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

ARTIFACTS = Path(os.environ.get("TLX_TEST_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"))

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


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
