"""[issue 7] FlashAttention rows. The GPU test is skipped without CUDA and a flash-attn package;
the doctor's detection (package search path, never importing the package) runs everywhere.

On a machine with a GPU: `pytest tests/gpu -q` (needs `pip install flash-attn`).
"""
from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

import tracer
from tests.models import tiny_llama
from tracer.compat.doctor import doctor
from tracer.compat.rows import flash_packages

IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])
HAS_FLASH = importlib.util.find_spec("flash_attn") is not None
HAS_CUDA = torch.cuda.is_available()


def test_doctor_detects_flash_packages_without_importing_them():
    before = {m for m in sys.modules if m.startswith("flash_attn")}
    found = flash_packages()
    assert {m for m in sys.modules if m.startswith("flash_attn")} == before, "detection imported flash_attn"
    assert ("flash_attn" in found) == HAS_FLASH
    model = tiny_llama()
    assert ("attention.flash_attention" in doctor(model).keys()) == bool(found)
    model.config._attn_implementation = "flash_attention_2"  # how a flash-configured model reads to the doctor
    row = doctor(model).row("attention.flash_attention")
    assert row.status == "not_tested" and "not verified" in row.evidence and any("tests/gpu/" in t for t in row.tests)
    assert ("no flash-attn package installed" in row.detail) == (not found)


@pytest.mark.skipif(not (HAS_CUDA and HAS_FLASH), reason="needs a CUDA GPU and the flash-attn package")
def test_flash_attention_2_capture_matches_and_validates():
    model = tiny_llama(attn="flash_attention_2").to("cuda", torch.bfloat16)
    ids = IDS.to("cuda")
    direct = model(ids).logits
    t = tracer.trace(model, (ids,))
    assert torch.equal(t.output.logits, direct)
    # the flash kernel is a custom op or an autograd Function: either way one recorded op per layer
    kinds = t.kind_counts()
    assert sum(n for k, n in kinds.items() if "flash" in k or k == "autograd_function") >= 2, kinds
    assert (report := tracer.validate(t)), report.to_dict()["findings"][:3]
