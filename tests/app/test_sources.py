"""What the explorer opens: shipped configs, saved traces (folder and zip), factories; typed refusals."""
from __future__ import annotations

import json

import pytest

from app import factory, sources
from app.errors import InvalidInputShapeError, InvalidModelSpecError, SourceNotFoundError
from tracer.errors import TracerError


def test_parse_shape_accepts_common_spellings_and_refuses_garbage():
    assert sources.parse_shape("1,8") == (1, 8)
    assert sources.parse_shape("2x16") == (2, 16)
    assert sources.parse_shape((1, 4)) == (1, 4)
    for bad in ("a,b", "0,8", "-1", ","):
        with pytest.raises(InvalidInputShapeError) as info:
            sources.parse_shape(bad)
        assert info.value.code == "invalid_input_shape" and info.value.remedy


def test_the_shipped_configs_include_the_default():
    shipped = sources.shipped_configs()
    assert sources.DEFAULT_CONFIG in shipped and "gpt2" in shipped
    assert shipped["gpt2"].parent.name == "configs"
    assert sources.is_config_json(shipped["gpt2"])


def test_unknown_sources_refuse_typed(tmp_path):
    with pytest.raises(SourceNotFoundError):
        sources.resolve_config("no-such-config")
    with pytest.raises(SourceNotFoundError):
        sources.open_path(tmp_path / "missing")
    with pytest.raises(InvalidModelSpecError):
        factory.open_factory("no_colon_here")
    with pytest.raises(InvalidModelSpecError):
        factory.open_factory("tests.models:does_not_exist")
    not_a_trace = tmp_path / "x.json"
    not_a_trace.write_text(json.dumps({"hello": 1}))
    with pytest.raises(TracerError) as info:  # neither a config nor a trace
        sources.open_path(not_a_trace)
    assert info.value.code == "source_not_found" and "neither a saved trace nor a model config" in info.value.message


def test_factory_is_traced_eagerly_with_ids_for_a_language_model():
    loaded = factory.open_factory("tests.models:tiny_gpt2", (1, 5))
    assert loaded.origin == "factory" and loaded.trace.ladder_state == "OBSERVED"
    assert loaded.trace.inputs[0].out.shape == (1, 5) and loaded.trace.inputs[0].out.dtype == "int64"
    assert loaded.model is not None and loaded.trace.values


def test_saved_trace_opens_from_folder_and_from_the_apps_zip(tmp_path):
    from app.views.export import zip_trace

    loaded = factory.open_factory("tests.models:tiny_gpt2")
    folder = tmp_path / "t"
    loaded.trace.save(str(folder))
    again = sources.open_path(folder)
    assert again.origin == "trace-file" and len(again.trace.ops) == len(loaded.trace.ops)
    z = zip_trace(loaded.trace, tmp_path / "t.trace.zip")
    from_zip = sources.open_path(z)
    assert [op.label for op in from_zip.trace.ops] == [op.label for op in loaded.trace.ops]
    assert from_zip.model is None


def test_config_opens_weights_free_with_declared_parameters(gpt2_loaded):
    t = gpt2_loaded.trace
    assert gpt2_loaded.origin == "config" and t.ladder_state == "HYPOTHESIS"
    assert t.param_count() == 124_439_808 and not t.values
    assert gpt2_loaded.config_path.name == "gpt2.json"
