"""`torchlens-explore diff A B` and `snapshot --diff A B` on saved traces and shipped configs."""
from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET

import pytest
import torch

import tracer
from app import cli
from tests.models import tiny_gpt2

IDS = torch.tensor([[5, 17, 3, 42, 8, 99, 1, 60]])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("sides")
    model = tiny_gpt2()
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.transformer.h[1].ln_1.weight.mul_(2.0)
    a = tracer.trace(model, (IDS,)).save(root / "a")
    b = tracer.trace(other, (IDS,)).save(root / "b")
    c = tracer.trace(tiny_gpt2(3), (IDS,)).save(root / "c")
    return a, b, c


def test_diff_prints_the_first_divergence_and_saves(saved, tmp_path, capsys):
    a, b, _ = saved
    assert cli.main(["diff", str(a), str(b), "--save", str(tmp_path / "d.json")]) == 0
    out = capsys.readouterr().out
    assert "first divergence: layer_norm_3" in out and "transformer.h.1.ln_1" in out
    loaded = tracer.load_diff(tmp_path / "d.json")
    assert loaded.first_divergence.module == "transformer.h.1.ln_1"


def test_diff_json_of_an_inserted_block(saved, capsys):
    a, _, c = saved
    assert cli.main(["diff", str(a), str(c), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "transformer.h.2" in data["added_modules"] and not data["removed_ops"]


def test_diff_of_two_configs_is_a_structure_diff(capsys):
    assert cli.main(["diff", "gpt2", "gpt2"]) == 0
    out = capsys.readouterr().out
    assert "structure diff only" in out and "no differences" in out and "HYPOTHESIS" in out


def test_diff_refuses_a_missing_side(saved, capsys):
    a, _, _ = saved
    assert cli.main(["diff", str(a)]) == 2
    assert "refused [invalid_input]" in capsys.readouterr().err


def test_snapshot_diff_writes_a_captioned_svg(saved, tmp_path, capsys):
    a, b, _ = saved
    out = tmp_path / "fig.svg"
    assert cli.main(["snapshot", "--diff", str(a), str(b), "--out", str(out)]) == 0
    root = ET.parse(out).getroot()
    texts = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
    assert "Diff of a:" in texts and "divergence" in texts


def test_diff_of_two_factory_models(capsys):
    assert cli.main(["diff", "--model-a", "tests.models:tiny_gpt2", "--model-b", "tests.models:tiny_gpt2"]) == 0
    assert "no differences" in capsys.readouterr().out  # same seed, same inputs: equal op for op
    assert cli.main(["diff", "--model-a", "tests.models:tiny_gpt2", "--model-b", "tests.models:tiny_llama",
                     "--max-depth", "1"]) == 0
    out = capsys.readouterr().out
    assert "+ model: LlamaModel  added" in out and "- transformer: GPT2Model  removed" in out
