"""The ladder on every surface (issue 38 item 6): slices, the networkx graph, the grad-fn sketch, and the two
envelope fields (ambient modes, wrap generation), sealed and locked like the rest."""
from __future__ import annotations

import pytest
import torch

import tracer
from tests.models import tiny_llama
from tests.tracer.test_hf_text import meta_twin
from tracer import errors
from tracer.bridges.transformers import trace_ids
from tracer.claims import envelope_from_dict
from tracer.digest import canonical_json, canonical_object_json, text_digest
from tracer.ir import OpSlice

IDS = torch.tensor([[5, 17, 3, 9, 42, 7]])


@pytest.fixture(scope="module")
def traces():
    real = tiny_llama()
    st = trace_ids(meta_twin(real), (1, 6))
    rt = tracer.trace(real, (IDS,))
    return st, rt, st.with_envelope(st.discharge_against(rt).envelope)


def test_slices_keep_the_ladder_of_the_trace_they_came_from(traces):
    st, rt, discharged = traces
    for trace, state in ((st, "HYPOTHESIS"), (rt, "OBSERVED"), (discharged, "CORROBORATED")):
        inside = trace.ops_in("model.layers.0")
        assert isinstance(inside, OpSlice) and inside.ladder_state == state and len(inside) > 5
        assert inside == tuple(op for op in trace.ops if any(a == "model.layers.0" for a, _ in op.module_stack))
        assert inside[1:3].ladder_state == state and inside[0] is inside.trace.ops[inside[0].index]
        assert trace[2:6].ladder_state == state and trace[2:6] == trace.ops[2:6]
        assert inside.ladder()["state"] == state and inside.structure_only == trace.structure_only
    assert st.ops_in("model.layers.0").ladder()["evidence"]["digest"] == st.envelope.digest


def test_networkx_graph_attributes_carry_the_ladder(traces):
    st, rt, discharged = traces
    assert rt.to_networkx().graph["ladder_state"] == "OBSERVED"
    g = st.to_networkx()
    assert g.graph["ladder_state"] == "HYPOTHESIS" and g.graph["structure_only"] is True
    assert g.graph["ladder"]["evidence"]["wrap_generation"]["generation"] >= 1
    assert discharged.to_networkx().graph["ladder"]["headline"].startswith("CORROBORATED")


def test_the_grad_fn_sketch_has_a_structure_only_legend_on_meta_only():
    from tracer.backward.walk import sketch_grad_fn

    real = tiny_llama()
    meta = meta_twin(real)
    ids = IDS.to("meta")
    text = sketch_grad_fn(meta(ids, labels=ids).loss, meta)
    assert "legend: structure only" in text and "HYPOTHESIS" in text
    assert "legend:" not in sketch_grad_fn(real(IDS, labels=IDS).loss, real)


def test_ambient_modes_name_the_modes_around_the_capture():
    meta = meta_twin(tiny_llama())
    plain = trace_ids(meta, (1, 6)).envelope.ambient_modes
    assert plain["torch_function"] == () and plain["grad_enabled"] is True
    with torch.no_grad(), torch.device("meta"):
        inside = trace_ids(meta, (1, 6)).envelope.ambient_modes
    assert inside["torch_function"] == ("torch.utils._device.DeviceContext(meta)",) and inside["grad_enabled"] is False
    assert "tracer" not in str(inside["torch_function"])  # the capture's own modes are not ambient


def test_wrap_generation_counts_the_holders_the_pass_through_replaced():
    from tracer.capture import boundaries

    meta = meta_twin(tiny_llama())
    before = trace_ids(meta, (1, 6)).envelope.wrap_generation
    assert trace_ids(meta, (1, 6)).envelope.wrap_generation == {**before, "function_apply": "tracer pass-through"}

    def other_apply(cls, *args, **kwargs):
        return boundaries.PASS_THROUGH.__func__(cls, *args, **kwargs)

    torch.autograd.Function.apply = classmethod(other_apply)
    try:
        after = trace_ids(meta, (1, 6)).envelope.wrap_generation
    finally:
        boundaries.install_pass_through()
    assert after["generation"] == before["generation"] + 1 and "other_apply" in after["function_apply"]
    assert torch.autograd.Function.__dict__["apply"] is boundaries.PASS_THROUGH


def test_the_two_fields_are_sealed_locked_and_saved(traces, tmp_path):
    st, _rt, _ = traces
    for field in ("ambient_modes", "wrap_generation"):
        with pytest.raises(errors.EnvelopeFieldLockedError):
            st.envelope.evolve("forged", **{field: {"generation": 99}})
    forged = st.envelope.evolve("noted", outcome="captured")  # another field evolves; these two stay
    assert forged.ambient_modes == st.envelope.ambient_modes and forged.wrap_generation == st.envelope.wrap_generation
    env = st.envelope.evolve("copy")
    object.__setattr__(env, "wrap_generation", {"generation": 99, "function_apply": "torch"})
    with pytest.raises(errors.EnvelopeNotMintedError):  # the digest covers them
        st.with_envelope(env)
    loaded = tracer.load(st.save(tmp_path / "t"))
    assert loaded.envelope.ambient_modes == st.envelope.ambient_modes
    assert loaded.envelope.wrap_generation == st.envelope.wrap_generation and loaded.envelope.schema == 2


def test_a_schema_1_envelope_loads_with_the_fields_not_recorded(traces):
    data = traces[0].envelope.to_dict()
    for field in ("ambient_modes", "wrap_generation", "digest"):
        del data[field]
    data["schema"] = 1
    data["digest"] = text_digest(canonical_object_json({k: canonical_json(v) for k, v in data.items()}))
    loaded = envelope_from_dict(data)
    assert loaded.ambient_modes is None and loaded.wrap_generation is None and loaded.ladder_state == "HYPOTHESIS"
    data["schema"] = 2  # a schema-2 envelope without them is malformed
    with pytest.raises(errors.EnvelopeTamperedError):
        envelope_from_dict(data)
