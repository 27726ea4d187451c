"""Writes that never destroy: every exported file goes to a temporary file beside it and is renamed on
success; a refused write (a real EFBIG from RLIMIT_FSIZE, standing in for a full disk) leaves the old
file as it was and no temporary behind; `--out` through a symbolic link is refused unless asked (issue 39)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.cli import main
from tracer.atomic_write import TEMP_MARK, write_atomic
from tracer.errors import OutputPathUnsafeError, TraceSaveFailedError

ROOT = Path(__file__).resolve().parents[2]
OLD = b"the old file, which a failed export must keep\n"

# One fresh interpreter (`FORKER`) builds what they export once, then forks a child for each: the child caps
# its own file size at 512 bytes (every export here is larger) with SIGXFSZ ignored, so its write gets EFBIG,
# as on a full disk. (A fresh interpreter each cost a torch import and a capture each: ~6 CPU-s.) One thread
# (OMP_NUM_THREADS=1), so no thread pool is forked.
FORKER = """\
import json, os, resource, signal, sys, traceback
sys.path.insert(0, {root!r})
import torch, tracer
from tests.models import tiny_gpt2
trace = tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 6)),))
def cap():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))
def run(body, out, err):
    os.chdir(os.path.dirname(out))
    os.dup2(err, 2)  # a pipe to the forker: a file would be capped too
    try:
        exec(body, {{"trace": trace, "cap": cap, "out": out}})
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    os._exit(code)
results = {{}}
for name, (body, out) in json.loads(sys.argv[1]).items():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        run(body, out, write)
    os.close(write)
    with os.fdopen(read, encoding="utf-8", errors="replace") as err:
        stderr = err.read()
    results[name] = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), stderr]
print(json.dumps(results))
"""
BODIES = {
    "me.json": ("from exporters.model_explorer import export\ncap()\nexport(trace, out)", "model_explorer_write_failed"),
    "nodes.json": ("from exporters.model_explorer import export_node_data\nimport os\ncap()\n"
                   "export_node_data(trace, os.path.join(os.path.dirname(out), 'nodes.json'), ('flops',))",
                   "model_explorer_write_failed"),
    "page.html": ("from exporters.html import write_html\ncap()\nwrite_html(trace, out)", "html_write_failed"),
    "fig.svg": ("from exporters.figures import export_svg\ncap()\nexport_svg(trace, out)", "figure_write_failed"),
    "fig.png": ("from exporters.figures import export_png\ncap()\nexport_png(trace, out, dpi=150)", "figure_write_failed"),
    "nb.html": ("from exporters.notebook import explore\nview = explore(trace)\ncap()\nview.save(out)",
                "html_write_failed"),
}


@pytest.fixture(scope="module")
def capped(tmp_path_factory) -> dict[str, tuple[int, str, Path]]:
    """Each of BODIES run capped, in its own folder holding the old file first: name -> (exit code, the
    child's stderr, the file it wrote to)."""
    outs = {}
    for name in BODIES:
        folder = tmp_path_factory.mktemp(name.replace(".", "-"))
        outs[name] = folder / name if name != "nodes.json" else folder / "nodes.flops.nodedata.json"
        outs[name].write_bytes(OLD)
    jobs = {name: (BODIES[name][0], str(out)) for name, out in outs.items()}
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", FORKER.format(root=str(ROOT)), json.dumps(jobs)],
                          cwd=tmp_path_factory.getbasetemp(), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout.splitlines()[-1])
    return {name: (*results[name], out) for name, out in outs.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BODIES))
def test_a_full_disk_leaves_the_old_file_and_no_temporary(capped, name):
    returncode, stderr, out = capped[name]
    code = BODIES[name][1]
    assert returncode != 0 and f"[{code}]" in stderr, stderr[-2000:]
    assert "File too large" in stderr or "EFBIG" in stderr or "errno 27" in stderr.lower(), stderr
    assert out.read_bytes() == OLD
    assert [p.name for p in out.parent.iterdir() if TEMP_MARK in p.name] == []


@pytest.mark.slow
def test_export_html_on_a_full_disk_keeps_keep_html(tmp_path):
    """The CLI as the issue ran it: `export-html ... --out keep.html` refused html_write_failed, keep.html intact."""
    keep = tmp_path / "keep.html"
    keep.write_bytes(OLD)
    script = textwrap.dedent(f"""
        import resource, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from app.export_html import export_html_main
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))
        sys.exit(export_html_main(["gpt2", "--out", {str(keep)!r}]))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 2 and "refused [html_write_failed]" in done.stderr, done.stderr[-2000:]
    assert keep.read_bytes() == OLD
    assert [p.name for p in tmp_path.iterdir() if TEMP_MARK in p.name] == []


def test_write_atomic_replaces_whole_and_keeps_the_old_on_failure(tmp_path):
    target = tmp_path / "f.bin"
    target.write_bytes(OLD)
    os.chmod(target, 0o640)

    def half_then_fail(fh):
        fh.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(TraceSaveFailedError, match="No space left"):
        write_atomic(target, half_then_fail, error=TraceSaveFailedError)
    assert target.read_bytes() == OLD and sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]
    write_atomic(target, b"new", error=TraceSaveFailedError)
    assert target.read_bytes() == b"new" and (target.stat().st_mode & 0o777) == 0o640  # the old file's mode kept


def test_out_through_a_symlink_is_refused_unless_asked(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(OLD)
    link = tmp_path / "fig.svg"
    link.symlink_to(victim)
    assert main(["snapshot", "gpt2", "--out", str(link)]) == 2
    assert "refused [output_path_unsafe]" in capsys.readouterr().err
    assert victim.read_bytes() == OLD and link.is_symlink()
    page = tmp_path / "page.html"
    page.symlink_to(victim)
    assert main(["export-html", "gpt2", "--out", str(page)]) == 2
    assert "output_path_unsafe" in capsys.readouterr().err and victim.read_bytes() == OLD
    assert main(["snapshot", "gpt2", "--out", str(link), "--follow-symlinks"]) == 0
    assert b"<svg" in victim.read_bytes() and link.is_symlink()
    with pytest.raises(OutputPathUnsafeError):
        write_atomic(link, b"x", error=TraceSaveFailedError)


def test_a_refused_export_download_transfers_nothing():
    """The export panel's download of a refused export (its callback returns None) sets no data and
    raises nothing; Panel's own FileDownload raised `Cannot transfer unknown object of type NoneType`."""
    import panel as pn

    from app.views.export import RefusableDownload

    plain = pn.widgets.FileDownload(callback=lambda: None, filename="fig.svg", embed=False)
    with pytest.raises(ValueError, match="NoneType"):
        plain._clicks += 1
    refusable = RefusableDownload(callback=lambda: None, filename="fig.svg", embed=False)
    refusable._clicks += 1
    assert refusable.data is None
    refusable.callback = lambda: __file__
    refusable._clicks += 1
    assert refusable.data.startswith("data:")
