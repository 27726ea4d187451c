"""Packaging: every package directory is listed in pyproject, and a wheel installed into a fresh venv
outside the checkout runs the console script with the shipped configs inside the installed package."""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tracer.capture import hotpath

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("tracer", "exporters", "app")
MAPPED = {"tracer.configs": "static/configs"}  # pyproject package-dir


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _package_dirs() -> dict[str, str]:
    """Dotted name -> folder of every directory with an __init__.py under the source roots (and mapped ones)."""
    found = {}
    for top in SOURCES:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT)
            if "__pycache__" not in rel.parts:
                found[".".join(rel.parts)] = str(rel)
    for name, folder in MAPPED.items():
        assert (ROOT / folder / "__init__.py").is_file(), folder
        found[name] = folder
    return found


def test_every_package_directory_is_listed():
    config = _pyproject()["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = _package_dirs()
    assert set(on_disk) - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - set(on_disk) == set(), "listed packages with no folder"
    assert config["package-dir"] == MAPPED


def _copy_sources(dest: Path) -> None:
    """The files a build reads, copied so the build leaves nothing (build/, *.egg-info) in the checkout."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")  # the extension is built, not copied
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, dest / name)
    for top in (*SOURCES, "static"):
        shutil.copytree(ROOT / top, dest / top, ignore=ignore)


def _run(cmd: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_checkout(tmp_path):
    src, dist, work = tmp_path / "src", tmp_path / "dist", tmp_path / "work"
    for d in (src, dist, work):
        d.mkdir()
    _copy_sources(src)
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                  str(src)], cwd=work)
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("torchlens_explore-*.whl")

    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=work)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=work).stdout.strip())
    installed = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                     cwd=work)
    assert installed.returncode == 0, installed.stderr
    # dependencies (torch, panel, ...) come from this interpreter's site-packages, appended after the venv's own
    deps = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    (purelib / "_test_dependencies.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")

    where = _run([str(python), "-c", "import tracer, tracer.configs, app; from tracer.configs import shipped_configs; "
                  "from tracer.capture import hotpath; print(tracer.__file__); print(app.__file__); "
                  "print(sorted(shipped_configs())); print(hotpath.ACTIVE)"], cwd=work)
    assert where.returncode == 0, where.stderr
    tracer_file, app_file, names, built = where.stdout.strip().splitlines()
    assert built == str(hotpath.ACTIVE)  # the wheel carries the C extension wherever this checkout has it built
    assert Path(tracer_file).is_relative_to(purelib) and Path(app_file).is_relative_to(purelib)
    shipped = sorted(p.name for p in (purelib / "tracer" / "configs").glob("*.json"))
    assert shipped == sorted(p.name for p in (ROOT / "static" / "configs").glob("*.json")) and "gpt2.json" in shipped
    assert "gpt2" in names and "llama-3.1-8b" in names

    script = venv / "bin" / "torchlens-explore"
    summary = _run([str(script), "--summary"], cwd=work)
    assert summary.returncode == 0, summary.stderr
    assert "LlamaForCausalLM" in summary.stdout and "Traceback" not in summary.stderr
    snap = _run([str(script), "snapshot", "gpt2", "--out", "fig.svg"], cwd=work)
    assert snap.returncode == 0, snap.stderr
    assert (work / "fig.svg").read_text()[:200].lstrip().startswith(("<?xml", "<svg"))
    assert not any(work.glob("*.egg-info"))
