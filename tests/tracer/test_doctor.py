"""The doctor: rows by stable key, detectors on real models, text/JSON, and the ledger agreeing."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_gpt2
from tracer.compat.doctor import Row, doctor, register, registered_keys
from tracer.compat.doctor import _REGISTRY

ROOT = Path(__file__).resolve().parents[2]
IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])


def test_plain_model_report_text_and_json():
    report = doctor(tiny_gpt2(), (IDS,))
    assert report.keys() == ["torch.capture", "cuda.graphs"]
    assert report.row("torch.capture").status == "pass" and torch.__version__ in report.row("torch.capture").evidence
    data = json.loads(report.to_json())
    assert [r["key"] for r in data["rows"]] == report.keys()
    assert "evidence:" in report.to_text()


def test_detectors_fire_on_the_paths_they_name(tmp_path):
    accelerate = pytest.importorskip("accelerate")
    assert "accelerate.dispatch" in doctor(accelerate.dispatch_model(tiny_gpt2(), {"": "cpu"})).keys()
    assert "accelerate.cpu_offload" in doctor(accelerate.cpu_offload(tiny_gpt2(), execution_device="cpu")).keys()
    disk = doctor(accelerate.disk_offload(tiny_gpt2(), str(tmp_path), execution_device="cpu"))
    assert "accelerate.disk_offload" in disk.keys() and "accelerate.cpu_offload" not in disk.keys()
    multi = tiny_gpt2()
    multi.hf_device_map = {"transformer": 0, "lm_head": 1}
    assert doctor(multi).row("accelerate.multi_device").status == "known_broken"
    bnb = pytest.importorskip("bitsandbytes")
    q8 = nn.Sequential(bnb.nn.Linear8bitLt(64, 32, has_fp16_weights=False))
    q4 = nn.Sequential(bnb.nn.Linear4bit(64, 32))
    assert doctor(q8).row("bitsandbytes.int8").severity == "warning"
    assert doctor(q4).row("bitsandbytes.4bit").status == "pass"
    peft = pytest.importorskip("peft")
    lora = peft.get_peft_model(tiny_gpt2(), peft.LoraConfig(r=2, target_modules=["c_attn"], fan_in_fan_out=True))
    assert doctor(lora).row("peft.lora").status == "pass"
    gptq = tiny_gpt2()
    gptq.config.quantization_config = {"quant_method": "gptq", "bits": 4}
    assert doctor(gptq).row("quant.gptq_awq").status == "not_tested"
    with torch.device("meta"):
        meta = nn.Linear(4, 4)
    assert doctor(meta).row("meta.structure_only").status == "scope"
    assert "accelerate.multi_device" not in doctor(tiny_gpt2()).keys()


def test_adding_a_row_is_one_function_and_one_registration():
    @register("test.always")
    def always(model, inputs):
        return Row("test.always", "not_tested", "info", "tests/tracer/test_doctor.py::test_adding_a_row")

    try:
        assert doctor(nn.Linear(2, 2)).keys()[-1] == "test.always"
    finally:
        _REGISTRY[:] = [(k, f) for k, f in _REGISTRY if k != "test.always"]


def test_rows_and_ledger_agree():
    ledger = (ROOT / "docs" / "deployment.md").read_text()
    for key in registered_keys():
        assert f"`{key}`" in ledger, f"docs/deployment.md lacks a row for {key}"
    # every test a doctor row or the ledger names exists
    import tracer.compat.rows as rows

    named = set(re.findall(r"tests/tracer/(test_\w+\.py)::(test_\w+)", Path(rows.__file__).read_text() + ledger))
    assert named
    for file, test in named:
        assert f"def {test}(" in (ROOT / "tests" / "tracer" / file).read_text(), f"{file}::{test}"


def test_invalid_row_is_refused():
    with pytest.raises(ValueError):
        Row("x", "fine", "info", "")
