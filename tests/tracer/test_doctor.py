"""The doctor: the whole ledger on every model (applicable rows first), detectors on real models, the ledger agreeing."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_gpt2
from tracer.compat.doctor import Detector, Row, doctor
from tracer.compat.rows import DETECTORS

ROOT = Path(__file__).resolve().parents[2]
IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])
ASKED_ABOUT = {"accelerate.cpu_offload", "accelerate.disk_offload", "bitsandbytes.int8", "bitsandbytes.4bit",
               "peft.lora", "quant.gptq_awq", "serving.engines"}  # offload, 8-bit, LoRA, GPTQ, vLLM


def test_every_model_sees_the_whole_ledger_applicable_rows_first():
    report = doctor(tiny_gpt2(), (IDS,))
    assert report.ledger_keys() and sorted(report.ledger_keys()) == sorted(d.key for d in DETECTORS)
    flags = [r.applies for r in report.rows]
    assert flags == sorted(flags, reverse=True), "applicable rows come first"
    assert report.keys() == [r.key for r in report.rows if r.applies]
    assert report.keys()[0] == "torch.capture" and "accelerate.cpu_offload" not in report.keys()
    assert ASKED_ABOUT <= set(report.ledger_keys())
    assert not report.row("peft.lora").applies and report.row("peft.lora").status == "pass"
    capture = report.row("torch.capture")
    assert capture.applies and capture.status == "pass" and torch.__version__ in capture.evidence


def test_text_and_json_carry_the_same_rows():
    report = doctor(tiny_gpt2(), (IDS,))
    data = json.loads(report.to_json())
    assert [r["key"] for r in data["rows"]] == report.ledger_keys() and data["applicable"] == len(report.keys())
    for row, item in zip(report.rows, data["rows"]):
        assert item["applies"] == row.applies and item["tests"] == list(row.tests) and item["evidence"] == row.evidence
    text = report.to_text()
    assert "applies to this model:" in text and "does not apply to this model:" in text
    assert text.index("torch.capture") < text.index("does not apply") < text.index("serving.engines")
    for row in report.rows:
        assert row.key in text and row.evidence in text


def test_user_facing_evidence_is_words_and_test_ids_stay_in_the_json():
    for row in doctor(tiny_gpt2(), (IDS,)).rows:
        assert row.tests, f"{row.key} names no test"
        assert "tests/" not in row.evidence and "::" not in row.evidence, row.evidence
        assert all(re.fullmatch(r"tests/[\w/]+\.py::test_\w+", t) for t in row.tests), row.tests


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
    assert doctor(q8).row("bitsandbytes.int8").severity == "warning" and doctor(q8).row("bitsandbytes.int8").applies
    assert doctor(q4).row("bitsandbytes.4bit").status == "pass" and "bitsandbytes.4bit" in doctor(q4).keys()
    peft = pytest.importorskip("peft")
    lora = peft.get_peft_model(tiny_gpt2(), peft.LoraConfig(r=2, target_modules=["c_attn"], fan_in_fan_out=True))
    assert doctor(lora).row("peft.lora").status == "pass" and doctor(lora).row("peft.lora").applies
    gptq = tiny_gpt2()
    gptq.config.quantization_config = {"quant_method": "gptq", "bits": 4}
    assert doctor(gptq).row("quant.gptq_awq").status == "not_tested" and "quant.gptq_awq" in doctor(gptq).keys()
    with torch.device("meta"):
        meta = nn.Linear(4, 4)
    assert doctor(meta).row("meta.structure_only").status == "scope" and doctor(meta).row("meta.structure_only").applies
    assert "accelerate.multi_device" not in doctor(tiny_gpt2()).keys()


def test_zoo_rows_report_what_the_sweep_found():
    from tracer.compat.zoo import zoo_facts

    facts = zoo_facts()
    gpt2 = doctor(tiny_gpt2()).row("zoo.transformers")
    assert gpt2.applies and "GPT2LMHeadModel" in gpt2.detail + gpt2.evidence
    expected = facts["transformers"].get("GPT2LMHeadModel")
    if expected is None:
        assert gpt2.status == "not_tested"
    else:
        assert (gpt2.status == "pass") == (not expected["failures"])
    plain = doctor(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    assert not plain.row("zoo.transformers").applies
    failing = sorted(name for name, f in facts["torch_nn"].items() if any(c.startswith("train.") for c in f["failures"])
                     and name in ("BatchNorm1d", "LSTM", "Identity"))
    bn = doctor(nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).train()).row("zoo.torch_nn")
    assert bn.applies == ("BatchNorm1d" in failing)
    if bn.applies:
        assert bn.status == "known_broken" and "BatchNorm1d" in bn.detail


def test_adding_a_row_is_one_detector_in_the_tuple():
    always = Detector(Row("test.always", "not_tested", "info", "a path nobody takes", tests=("tests/x.py::test_x",)),
                      lambda model, inputs: None)
    report = doctor(nn.Linear(2, 2), detectors=(*DETECTORS, always))
    assert report.rows[-1].key == "test.always" and not report.rows[-1].applies
    assert "test.always" not in [r.key for r in doctor(nn.Linear(2, 2)).rows], "no registry: nothing leaks"


def test_rows_and_ledger_agree():
    ledger = (ROOT / "docs" / "deployment.md").read_text()
    for d in DETECTORS:
        assert f"`{d.key}`" in ledger, f"docs/deployment.md lacks a row for {d.key}"
    import tracer.compat.rows as rows
    import tracer.compat.zoo as zoo

    sources = Path(rows.__file__).read_text() + Path(zoo.__file__).read_text() + ledger
    named = set(re.findall(r"tests/((?:\w+/)*test_\w+\.py)::(test_\w+)", sources))
    assert named
    for file, test in named:
        assert f"def {test}(" in (ROOT / "tests" / file).read_text(), f"{file}::{test}"


def test_invalid_row_is_refused():
    with pytest.raises(ValueError):
        Row("x", "fine", "info", "")


def test_public_doctor_is_the_function():
    assert tracer.doctor is doctor
