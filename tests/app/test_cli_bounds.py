"""CLI inputs past their bounds are typed refusals before any work: links to /dev/zero, FIFOs, nested
configs past the layer limit, a deep overlay, a PNG too large to draw (issue 39, items 4-6)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main
from app.config_check import read_config, sub_configs
from app.errors import LimitExceededError
from tracer.errors import ConfigInvalidError

ROOT = Path(__file__).resolve().parents[2]
LLAMA_TEXT = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 64}
CLIP_VISION = {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
               "num_attention_heads": 4, "image_size": 32, "patch_size": 8}


def llava(text_layers: int, vision_layers: int = 2) -> dict:
    return {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
            "text_config": {**LLAMA_TEXT, "num_hidden_layers": text_layers},
            "vision_config": {**CLIP_VISION, "num_hidden_layers": vision_layers}}


def refused(capsys, argv: list[str]) -> str:
    """Run the CLI in process; assert a typed refusal (exit 2, no 'failed unexpectedly'); return stderr."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "refused [" in err and "unexpectedly" not in err, err
    return err


@pytest.mark.parametrize("text,vision,limited", [(1100, 2, True), (600, 600, True), (2, 2, False), (1000, 20, False)])
def test_nested_config_layers_count_toward_the_layer_limit(tmp_path, text, vision, limited):
    """text_config.num_hidden_layers=1100 was built (1,100 layers, 199 s); nested layers now add up."""
    path = tmp_path / "llava.json"
    path.write_text(json.dumps(llava(text, vision)))
    if limited:
        with pytest.raises(LimitExceededError) as info:
            read_config(path)
        assert info.value.findings["limit"] == "layers"
    else:
        assert read_config(path)["text_config"]["num_hidden_layers"] == text


def test_nested_config_values_are_checked_like_the_top_level(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**llava(2), "text_config": {**LLAMA_TEXT, "num_attention_heads": 5}}))
    with pytest.raises(ConfigInvalidError, match="text_config"):
        read_config(path)
    path.write_text(json.dumps({**llava(2), "text_config": {**LLAMA_TEXT, "num_hidden_layers": -3}}))
    with pytest.raises(ConfigInvalidError, match="text_config.num_hidden_layers"):
        read_config(path)
    assert [w for w, _ in sub_configs({"a": {"b": [{"c": {}}]}})] == ["", "a", "a.b[0]", "a.b[0].c"]


def test_nested_layer_limit_reaches_snapshot_and_memory_figure(tmp_path, capsys):
    path = tmp_path / "llava.json"
    path.write_text(json.dumps(llava(1100)))
    assert "limit_exceeded" in refused(capsys, ["snapshot", str(path), "--out", str(tmp_path / "f.svg")])
    assert "limit_exceeded" in refused(capsys, ["memory-figure", str(path), "--out", str(tmp_path / "m.svg")])


# Runs each CLI call of the cases in one child interpreter, in turn: a blocking read would hang the child,
# whose watchdog then dumps the stacks and exits (the parent's timeout only guards the suite).
CHILD = """
import contextlib, faulthandler, io, json, sys
from app.cli import main
faulthandler.dump_traceback_later(120, exit=True)
answers = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    answers.append([code, err.getvalue()])
print(json.dumps(answers))
"""


@pytest.mark.slow
def test_dev_zero_links_and_fifos_are_refused_at_once(tmp_path):
    """Each call in a child process (a blocking read would hang the suite), all in one interpreter: one
    torch import instead of ten, and each call still reads its own input from its own console entry."""
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.json")
    os.mkfifo(tmp_path / "trace.zip")
    os.mkfifo(tmp_path / "save.json")  # its own FIFO: no writer to it may unblock a reader of fifo.json
    good = tmp_path / "gpt2.json"
    good.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64,
                                "vocab_size": 100}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TLX_DEBUG", None)
    cases = [(argv, "input_not_regular_file") for bad in ("zero.json", "fifo.json")
             for argv in (["snapshot", bad, "--out", "f.svg"], ["diff", bad, "gpt2.json"],
                          ["export-html", "gpt2.json", "--out", "m.html", "--overlay-json", bad],
                          ["memory-figure", bad, "--out", "m.svg"])]
    cases += [(["snapshot", "trace.zip", "--out", "f.svg"], "input_not_regular_file"),
              (["diff", "gpt2", "gpt2", "--save", "save.json"], "diff_save_path_invalid")]
    child = subprocess.run([sys.executable, "-c", CHILD, json.dumps([argv for argv, _ in cases])], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    answers = json.loads(child.stdout.strip().splitlines()[-1])
    for (argv, code), (status, err) in zip(cases, answers, strict=True):
        assert status == 2 and f"refused [{code}]" in err and "unexpectedly" not in err, (argv, err)
    assert not (tmp_path / "m.html").exists()


def test_a_deep_or_nested_overlay_is_a_typed_refusal(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_bytes(b'{"a":' * 100_000 + b"1" + b"}" * 100_000)
    lists = tmp_path / "lists.json"
    lists.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    for path in (deep, lists):
        err = refused(capsys, ["export-html", "gpt2", "--out", str(tmp_path / "m.html"), "--overlay-json", str(path)])
        assert "invalid_input" in err
    assert not (tmp_path / "m.html").exists()


def test_a_png_past_the_pixel_bound_is_refused_before_drawing(tmp_path, capsys):
    """All inside the documented option bounds; was a MemoryError. An old file at --out is kept."""
    out = tmp_path / "g.png"
    out.write_bytes(b"old figure")
    err = refused(capsys, ["snapshot", "gpt2", "--out", str(out), "--dpi", "2400", "--width", "100",
                           "--max-height", "100", "--font-pt", "72"])
    assert "figure_options_invalid" in err and "pixels" in err
    assert out.read_bytes() == b"old figure"
