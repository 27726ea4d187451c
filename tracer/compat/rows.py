"""The built-in doctor rows: one detector per deployment path (see tracer.doctor).

Each evidence sentence names the test that backs the row; docs/deployment.md is the same
ledger in prose, and tests/tracer/test_doctor.py checks that the two agree.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .doctor import Row, register

T_VALIDATE = "tests/tracer/test_validate.py::test_real_models_replay_bit_exact_and_every_edge_carries_data"
T_WITNESS = "tests/tracer/test_witness.py::test_hidden_computation_marks_the_trace_unverified"
T_OFFLOAD = "tests/tracer/test_deploy_accelerate.py::test_offload_capture_matches_plain_twin_and_validates"
T_OFFLOAD_REFUSE = "tests/tracer/test_deploy_accelerate.py::test_meta_parameter_without_offload_hook_refuses"
T_BUFFERS = "tests/tracer/test_deploy_accelerate.py::test_buffer_offload_attributes_the_loaded_buffer"
T_BUFFERS_VALID = "tests/tracer/test_deploy_accelerate.py::test_buffer_offload_capture_validates"
T_INT8 = "tests/tracer/test_deploy_quantized.py::test_validation_refuses_8bit_on_the_parameter_invariant"
T_4BIT = "tests/tracer/test_deploy_quantized.py::test_validation_returns_false_for_4bit"
T_LORA = "tests/tracer/test_deploy_quantized.py::test_peft_lora_parity_hierarchy_attribution_and_validation"
T_DETECT = "tests/tracer/test_doctor.py::test_detectors_fire_on_the_paths_they_name"


def _hooks(model: nn.Module) -> list[Any]:
    from ..bridges.accelerate import hooks_of

    return [h for m in model.modules() for h in hooks_of(m)]


def _offload_storage(model: nn.Module) -> set[str]:
    from ..bridges.accelerate import _storage

    return {_storage(h.weights_map) for h in _hooks(model)
            if getattr(h, "offload", False) and getattr(h, "weights_map", None) is not None}


@register("torch.capture")
def torch_capture(model: nn.Module, inputs: Any) -> Row:
    return Row("torch.capture", "pass", "info",
               f"torch {torch.__version__}: eager capture with replay validation ({T_VALIDATE}); "
               f"completeness witness via TorchDispatchMode ({T_WITNESS})",
               detail="TorchFunctionMode capture, forward replay, dispatch census")


@register("accelerate.dispatch")
def accelerate_dispatch(model: nn.Module, inputs: Any) -> Row | None:
    devices = _devices(model)
    device_map = getattr(model, "hf_device_map", None)
    if not (_hooks(model) or device_map) or len(devices) > 1 or _offload_storage(model):
        return None
    if device_map and len({str(d) for d in device_map.values()}) > 1:
        return None
    return Row("accelerate.dispatch", "pass", "info",
               f"dispatch_model on one device: labels equal the plain twin, validation passes ({T_OFFLOAD}[dispatch])",
               detail=f"single device {sorted(devices)[0] if devices else '?'}")


@register("accelerate.cpu_offload")
def accelerate_cpu_offload(model: nn.Module, inputs: Any) -> Row | None:
    if "cpu" not in _offload_storage(model):
        return None
    return Row("accelerate.cpu_offload", "pass", "info",
               f"cpu_offload: outputs equal, hook loading never recorded, weights attributed, validation passes "
               f"({T_OFFLOAD}[cpu]); meta params without a hook refuse ({T_OFFLOAD_REFUSE})",
               detail="parameter records are shape-only outside a forward")


@register("accelerate.disk_offload")
def accelerate_disk_offload(model: nn.Module, inputs: Any) -> Row | None:
    if "disk" not in _offload_storage(model):
        return None
    return Row("accelerate.disk_offload", "pass", "info",
               f"disk_offload: outputs equal, validation passes, replay reloads from disk ({T_OFFLOAD}[disk])",
               detail="parameter records are shape-only outside a forward")


@register("accelerate.multi_device")
def accelerate_multi_device(model: nn.Module, inputs: Any) -> Row | None:
    device_map = getattr(model, "hf_device_map", None) or {}
    mapped = {str(d) for d in device_map.values() if str(d) not in ("cpu", "disk", "meta")}
    if len(mapped) < 2 and len(_devices(model)) < 2:
        return None
    return Row("accelerate.multi_device", "known_broken", "error",
               f"a device_map over several accelerators is not exercised (this CPU machine has one device); "
               f"detection only ({T_DETECT})",
               detail="cross-device hops are moved by hooks the capture suspends; edges may be broken")


@register("accelerate.buffer_offload")
def accelerate_buffer_offload(model: nn.Module, inputs: Any) -> Row | None:
    if not any(getattr(h, "offload_buffers", False) for h in _hooks(model)):
        return None
    return Row("accelerate.buffer_offload", "pass", "info",
               f"offload_buffers=True: a buffer a hook loads for the call is attributed to its address "
               f"({T_BUFFERS}); validation passes on a small model ({T_BUFFERS_VALID})",
               detail="verified at small scale only")


@register("bitsandbytes.int8")
def bnb_int8(model: nn.Module, inputs: Any) -> Row | None:
    if not any(type(m).__name__ == "Linear8bitLt" for m in model.modules()):
        return None
    return Row("bitsandbytes.int8", "pass", "warning",
               f"Linear8bitLt: outputs equal; int8 state reads disclosed in one warning; not verified; "
               f"validation raises trace_invariant_violated ({T_INT8})",
               detail="disclosed degradation: weights are not attributed")


@register("bitsandbytes.4bit")
def bnb_4bit(model: nn.Module, inputs: Any) -> Row | None:
    if not any(type(m).__name__ == "Linear4bit" for m in model.modules()):
        return None
    return Row("bitsandbytes.4bit", "pass", "warning",
               f"Linear4bit: outputs equal; quant_state reads disclosed in one warning; not verified; "
               f"validation returns False ({T_4BIT})",
               detail="disclosed degradation: dequantized values are not dense weights")


@register("peft.lora")
def peft_lora(model: nn.Module, inputs: Any) -> Row | None:
    from ..bridges.peft import adapter_info

    info = adapter_info(model)
    if info is None:
        return None
    tested = info["types"] == ["LORA"]
    return Row("peft.lora", "pass" if tested else "not_tested", "info" if tested else "warning",
               f"LoRA: output parity, adapter modules in the hierarchy, adapter params attributed, validation "
               f"passes ({T_LORA})" if tested else f"{'/'.join(info['types'])} adapters are not tested",
               detail=f"adapters {', '.join(info['adapters'])}")


@register("quant.gptq_awq")
def gptq_awq(model: nn.Module, inputs: Any) -> Row | None:
    from ..bridges.bitsandbytes import quantization_method

    method = quantization_method(model)
    if method not in ("gptq", "awq"):
        return None
    return Row("quant.gptq_awq", "not_tested", "warning",
               f"{method.upper()} kernels are not installed or exercised here; detection from "
               f"quantization_config.quant_method or the module's package ({T_DETECT})",
               detail=f"quant_method={method}")


@register("cuda.graphs")
def cuda_graphs(model: nn.Module, inputs: Any) -> Row:
    return Row("cuda.graphs", "not_tested", "info",
               f"CUDA graph replay is not captured or tested (no accelerator here); trace the eager model ({T_DETECT})")


@register("serving.engines")
def serving_engines(model: nn.Module, inputs: Any) -> Row | None:
    package = type(model).__module__.split(".")[0]
    if package not in ("vllm", "sglang"):
        return None
    return Row("serving.engines", "scope", "warning",
               f"{package} models are out of scope: trace the Hugging Face twin built from the same config ({T_DETECT})",
               detail=f"{type(model).__module__}")


@register("distributed.tensor_parallel")
def tensor_parallel(model: nn.Module, inputs: Any) -> Row | None:
    from ..bridges.distributed import distributed_findings  # the detection capture refuses with

    found = distributed_findings(model, inputs if isinstance(inputs, tuple) else ())
    if found is None:
        return None
    return Row("distributed.tensor_parallel", "scope", "error",
               f"DTensor / tensor-parallel models are refused at capture entry (distributed_capture_unsupported, "
               f"kinds {'/'.join(found['kinds'])}), state unchanged; verified on every rank of a 2-process gloo mesh "
               f"for parallelize_module ({T_DTENSOR_MLP}) and tp_plan='auto' ({T_DTENSOR_TP}); capture the "
               f"unsharded model", detail=f"refused: {found['num_dtensors']} DTensors on mesh {found['mesh']}")


# -- MoE, foreign kernels, FlashAttention -------------------------------------------
T_MOE = "tests/tracer/test_moe.py::test_router_logits_are_exact_outputs_and_experts_are_attributed"
T_DTENSOR_MLP = "tests/tracer/test_dtensor.py::test_parallelize_module_mlp_refuses_on_every_rank"
T_DTENSOR_TP = "tests/tracer/test_dtensor.py::test_tp_plan_auto_llama_is_sharded_matches_and_refuses"
T_FOREIGN = "tests/tracer/test_foreign_kernels.py::test_function_is_one_boundary_op_with_its_inputs_outputs_and_name"
T_FOREIGN_DEP = "tests/tracer/test_foreign_kernels.py::test_perturbation_excuses_exactly_the_declared_edges"
T_ROUNDTRIP = "tests/tracer/test_foreign_kernels.py::test_round_trip_is_a_boundary_op_never_dropped"
T_FLASH = "tests/gpu/test_flash_attention.py"
MOE_TESTED = ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "OlmoeForCausalLM")
FLASH_PACKAGES = ("flash_attn", "flash_attn_interface")


@register("moe.router_logits")
def moe_router_logits(model: nn.Module, inputs: Any) -> Row | None:
    experts = [m for m in model.modules() if type(m).__name__.endswith("Experts")
               and getattr(m, "gate_up_proj", None) is not None]
    if not experts:
        return None
    tested = type(model).__name__ in MOE_TESTED
    return Row("moe.router_logits", "pass" if tested else "not_tested", "info" if tested else "warning",
               f"fused MoE experts (3-D gate_up_proj/down_proj): exact output incl. router logits, each router-logit "
               f"tensor an output op, expert weights attributed, validation passes for tiny Mixtral, Qwen2-MoE and "
               f"OLMoE under eager and sdpa ({T_MOE})" if tested else
               f"{type(model).__name__} has fused experts but is not among the tested MoE models ({T_MOE})",
               detail=f"{len(experts)} fused expert modules")


@register("foreign.kernels")
def foreign_kernels(model: nn.Module, inputs: Any) -> Row | None:
    from ..replay.interpreter import FOREIGN_DEPENDENCE

    kernels = _foreign_kernels_in(model)
    if not kernels:
        return None
    declared = sorted(k for k in FOREIGN_DEPENDENCE if any(k.endswith(n.replace("::", ".")) for n in kernels))
    return Row("foreign.kernels", "pass", "warning",
               f"autograd Functions become one boundary op, replayed by calling apply again ({T_FOREIGN}); "
               f"numpy/DLPack round trips are boundary ops that replay refuses (foreign_kernel_not_replayable) "
               f"({T_ROUNDTRIP}); the perturbation check excuses only declared per-output dependence ({T_FOREIGN_DEP})",
               detail=f"{len(kernels)} foreign kernels in the model's code ({', '.join(kernels[:6])}); "
                      f"{len(declared)} with declared dependence")


@register("attention.flash_attention")
def flash_attention(model: nn.Module, inputs: Any) -> Row | None:
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None) or ""
    found = flash_packages()
    if "flash" not in impl and not found:
        return None
    where = ", ".join(f"{k} {v}" for k, v in found.items()) or "no flash-attn package installed"
    return Row("attention.flash_attention", "not_tested", "warning",
               f"FlashAttention needs a CUDA GPU; not verified on this CPU machine ({where}); a GPU script is "
               f"{T_FLASH} (skipped without CUDA)", detail=f"attn_implementation={impl or '?'}")


def flash_packages() -> dict[str, str]:
    """Flash-attention packages on the search path, module -> version, found without importing them."""
    import importlib.metadata
    import importlib.util

    found = {}
    dists = None
    for name in FLASH_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            continue
        if dists is None:
            dists = importlib.metadata.packages_distributions()
        versions = []
        for dist in dists.get(name, ()):
            try:
                versions.append(importlib.metadata.version(dist))
            except importlib.metadata.PackageNotFoundError:
                pass
        found[name] = versions[0] if versions else "version unknown"
    return found


def _foreign_kernels_in(model: nn.Module) -> list[str]:
    """autograd Functions and torch.library custom ops defined in the modules the model's classes come from."""
    import sys

    from ..capture.boundaries import TRANSPARENT_PACKAGES

    names = set()
    for module_name in {type(m).__module__ for m in model.modules()}:
        if module_name.partition(".")[0] in TRANSPARENT_PACKAGES:
            continue
        for value in vars(sys.modules.get(module_name, object())).values():
            if isinstance(value, type) and issubclass(value, torch.autograd.Function) \
                    and value is not torch.autograd.Function and value.__module__ == module_name:
                names.add(f"{module_name}.{value.__qualname__}")
            elif type(value).__name__ == "CustomOpDef":
                names.add(str(getattr(value, "_qualname", value)))
    return sorted(names)


@register("meta.structure_only")
def meta_structure_only(model: nn.Module, inputs: Any) -> Row | None:
    if _hooks(model) or not any(p.is_meta for p in model.parameters()):
        return None
    return Row("meta.structure_only", "scope", "info",
               f"weights-free model: structure-only capture (claims start as HYPOTHESIS); replay validation is "
               f"refused (structure_only_not_replayable) ({T_DETECT})", detail="structure only")


def _devices(model: nn.Module) -> set[str]:
    return {p.device.type if p.device.type != "cuda" else str(p.device) for p in model.parameters()
            if not p.is_meta}
