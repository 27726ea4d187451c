"""The ledger: one detector per deployment path, listed explicitly in `DETECTORS`.

Each entry is the path's general row (evidence in words, the backing tests by id) and a detector
that returns the row for a model taking that path. docs/deployment.md is the same ledger in prose;
tests/tracer/test_doctor.py checks that the two agree and that every named test exists.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import nn

from .doctor import Detector, Row, module_name
from .zoo import torch_nn_ledger, transformers_ledger, zoo_torch_nn, zoo_transformers

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
T_MOE = "tests/tracer/test_moe.py::test_router_logits_are_exact_outputs_and_experts_are_attributed"
T_DTENSOR_MLP = "tests/distributed/test_tensor_parallel.py::test_mlp_colwise_rowwise"
T_DTENSOR_SP = "tests/distributed/test_tensor_parallel.py::test_mlp_sequence_parallel"
T_DTENSOR_LLAMA = "tests/distributed/test_tensor_parallel.py::test_tiny_llama_tensor_parallel"
T_DTENSOR_TP = "tests/distributed/test_tensor_parallel.py::test_tiny_llama_transformers_tp_plan"
T_FSDP = "tests/distributed/test_fsdp.py::test_mlp_fully_shard"
T_DIST_REFUSE = ("tests/distributed/test_tensor_parallel.py::"
                 "test_untested_setups_refuse_typed_and_leave_the_model_unchanged")
T_FOREIGN = "tests/tracer/test_foreign_kernels.py::test_function_is_one_boundary_op_with_its_inputs_outputs_and_name"
T_FOREIGN_DEP = "tests/tracer/test_foreign_kernels.py::test_perturbation_excuses_exactly_the_declared_edges"
T_ROUNDTRIP = "tests/tracer/test_foreign_kernels.py::test_round_trip_is_a_boundary_op_never_dropped"
T_SCRIPT = "tests/tracer/test_foreign_kernels.py::test_a_torchscript_child_is_one_boundary_op_reading_its_parameters"
T_FLASH = "tests/gpu/test_flash_attention.py::test_flash_attention_2_capture_matches_and_validates"
T_FLASH_DETECT = "tests/gpu/test_flash_attention.py::test_doctor_detects_flash_packages_without_importing_them"
T_DETECTORS = "tests/tracer/test_doctor_detectors.py"
T_FA4 = f"{T_DETECTORS}::test_fa4_interface_is_detected_from_the_search_path_without_importing_it"
T_FA4_BOUNDARY = f"{T_DETECTORS}::test_fa4_function_is_a_boundary_op_whose_lse_is_excused_from_v_only"
T_GRAPHS = f"{T_DETECTORS}::test_cuda_graphs_fires_on_a_forward_installed_by_make_graphed_callables"
T_SERVING = f"{T_DETECTORS}::test_serving_fires_on_a_vllm_or_sglang_submodule"
T_GPTQ = f"{T_DETECTORS}::test_gptq_awq_fires_on_quant_method_or_a_gptq_awq_package_only"
MOE_TESTED = ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "OlmoeForCausalLM")
FLASH_PACKAGES = ("flash_attn", "flash_attn_interface")


# -- the general row of each path -------------------------------------------------------------
TORCH_CAPTURE = Row(
    "torch.capture", "pass", "info",
    f"torch {torch.__version__}: eager capture replays bit for bit and every recorded edge carries data on tiny "
    f"GPT-2, Llama, BERT and ResNet; a completeness witness flags computation outside recorded ops",
    tests=(T_VALIDATE, T_WITNESS))
DISPATCH = Row(
    "accelerate.dispatch", "pass", "info",
    "accelerate dispatch_model on one device: op labels equal the plain twin's and validation passes",
    tests=(T_OFFLOAD,))
CPU_OFFLOAD = Row(
    "accelerate.cpu_offload", "pass", "info",
    "accelerate cpu_offload: outputs equal, hook weight loading never recorded, weights attributed, validation "
    "passes; meta parameters without an offload hook are refused",
    tests=(T_OFFLOAD, T_OFFLOAD_REFUSE))
DISK_OFFLOAD = Row(
    "accelerate.disk_offload", "pass", "info",
    "accelerate disk_offload: outputs equal, validation passes, replay reloads weights from disk",
    tests=(T_OFFLOAD,))
MULTI_DEVICE = Row(
    "accelerate.multi_device", "known_broken", "error",
    "a device_map over several accelerators is not exercised (one device here): detection only; cross-device "
    "moves happen inside hooks the capture suspends, so edges across devices are not proven",
    tests=(T_DETECT,))
BUFFER_OFFLOAD = Row(
    "accelerate.buffer_offload", "pass", "info",
    "accelerate offload_buffers=True: a buffer a hook loads for the call is attributed to its address; "
    "validation passes on a small model",
    tests=(T_BUFFERS, T_BUFFERS_VALID))
INT8 = Row(
    "bitsandbytes.int8", "pass", "warning",
    "bitsandbytes 8-bit (Linear8bitLt): outputs equal; int8 state reads disclosed in one warning; not verified: "
    "validation raises trace_invariant_violated because the weight is never attributed",
    tests=(T_INT8,))
FOUR_BIT = Row(
    "bitsandbytes.4bit", "pass", "warning",
    "bitsandbytes 4-bit (Linear4bit): outputs equal; quant_state reads disclosed in one warning; not verified: "
    "validation returns False",
    tests=(T_4BIT,))
LORA = Row(
    "peft.lora", "pass", "info",
    "PEFT LoRA on GPT-2: output parity, adapter modules in the hierarchy, adapter parameters attributed, "
    "validation passes; other adapter types are not tested",
    tests=(T_LORA,))
GPTQ_AWQ = Row(
    "quant.gptq_awq", "not_tested", "warning",
    "GPTQ and AWQ kernels are not installed or exercised here; the path is detected from "
    "quantization_config.quant_method, or a module class from a GPTQ/AWQ package (auto_gptq, gptqmodel, awq)",
    tests=(T_DETECT, T_GPTQ))
CUDA_GRAPHS = Row(
    "cuda.graphs", "not_tested", "info",
    "CUDA graph replay is not captured: a forward installed by torch.cuda.make_graphed_callables, or a doctor "
    "call inside an active CUDA stream capture, is detected (CPU stand-in only; GPU not run); trace the eager model",
    tests=(T_GRAPHS,))
SERVING = Row(
    "serving.engines", "scope", "warning",
    "vLLM and SGLang models, or any vLLM/SGLang submodule inside a model, are out of scope: trace the Hugging "
    "Face twin built from the same config",
    tests=(T_SERVING,))
TENSOR_PARALLEL = Row(
    "distributed.tensor_parallel", "pass", "info",
    "captured per rank on a real 2-process gloo mesh (parallelize_module colwise/rowwise/sequence parallel on an "
    "MLP and a tiny Llama, transformers tp_plan='auto', FSDP2 fully_shard): every op on its local shard with the DTensor's mesh, "
    "placements and global shape, collectives as ops (group, bytes), output bit-equal to the plain distributed "
    "forward; backward and structure-only captures of a sharded model, and pipeline stages, stay refused "
    "(distributed_capture_unsupported)",
    tests=(T_DTENSOR_MLP, T_DTENSOR_SP, T_DTENSOR_LLAMA, T_DTENSOR_TP, T_FSDP, T_DIST_REFUSE))
MOE = Row(
    "moe.router_logits", "pass", "info",
    "fused MoE experts (3-D gate_up_proj/down_proj) on tiny Mixtral, Qwen2-MoE and OLMoE under eager and sdpa: "
    "exact output including router logits, each router-logit tensor an output op, expert weights attributed, "
    "validation passes",
    tests=(T_MOE,))
FOREIGN = Row(
    "foreign.kernels", "pass", "warning",
    "autograd Functions, torch.library custom ops and TorchScript modules become one boundary op each, replayed "
    "by calling them again; numpy and DLPack round trips are boundary ops that replay refuses "
    "(foreign_kernel_not_replayable); the perturbation check excuses only declared per-output dependence",
    tests=(T_FOREIGN, T_ROUNDTRIP, T_FOREIGN_DEP, T_SCRIPT))
FLASH = Row(
    "attention.flash_attention", "not_tested", "warning",
    "FlashAttention needs a CUDA GPU: not verified on this CPU machine; flash-attn packages are detected "
    "without importing them; a GPU script exists (skipped without CUDA)",
    tests=(T_FLASH_DETECT, T_FLASH))
FLASH4 = Row(
    "attention.flash_attention_4", "not_tested", "warning",
    "FlashAttention 4 (flash_attn.cute.interface) is found on the search path without importing it; its "
    "FlashAttnFunc and FlashAttnVarlenFunc are one boundary op each whose log-sum-exp output is declared not to "
    "read v, so validation excuses exactly that edge (CPU stand-in only; GPU not run)",
    tests=(T_FA4, T_FA4_BOUNDARY))
META = Row(
    "meta.structure_only", "scope", "info",
    "weights-free (meta) model: structure-only capture, claims start as HYPOTHESIS until discharged against a "
    "real capture; replay validation is refused (structure_only_not_replayable)",
    tests=(T_DETECT,))


def _hooks(model: nn.Module) -> list[Any]:
    from ..bridges.accelerate import hooks_of

    return [h for m in model.modules() for h in hooks_of(m)]


def _offload_storage(model: nn.Module) -> set[str]:
    from ..bridges.accelerate import _storage

    return {_storage(h.weights_map) for h in _hooks(model)
            if getattr(h, "offload", False) and getattr(h, "weights_map", None) is not None}


def _devices(model: nn.Module) -> set[str]:
    return {p.device.type if p.device.type != "cuda" else str(p.device) for p in model.parameters()
            if not p.is_meta}


# -- detectors: the row for a model that takes the path, else None ------------------------------
def torch_capture(model: nn.Module, inputs: Any) -> Row:
    return replace(TORCH_CAPTURE, detail="TorchFunctionMode capture, forward replay, dispatch census")


def accelerate_dispatch(model: nn.Module, inputs: Any) -> Row | None:
    devices = _devices(model)
    device_map = getattr(model, "hf_device_map", None)
    if not (_hooks(model) or device_map) or len(devices) > 1 or _offload_storage(model):
        return None
    if device_map and len({str(d) for d in device_map.values()}) > 1:
        return None
    return replace(DISPATCH, detail=f"single device {sorted(devices)[0] if devices else '?'}")


def accelerate_cpu_offload(model: nn.Module, inputs: Any) -> Row | None:
    if "cpu" not in _offload_storage(model):
        return None
    return replace(CPU_OFFLOAD, detail="parameter records are shape-only outside a forward")


def accelerate_disk_offload(model: nn.Module, inputs: Any) -> Row | None:
    if "disk" not in _offload_storage(model):
        return None
    return replace(DISK_OFFLOAD, detail="parameter records are shape-only outside a forward")


def accelerate_multi_device(model: nn.Module, inputs: Any) -> Row | None:
    device_map = getattr(model, "hf_device_map", None) or {}
    mapped = {str(d) for d in device_map.values() if str(d) not in ("cpu", "disk", "meta")}
    if len(mapped) < 2 and len(_devices(model)) < 2:
        return None
    return replace(MULTI_DEVICE, detail="cross-device hops are moved by hooks the capture suspends; edges may be broken")


def accelerate_buffer_offload(model: nn.Module, inputs: Any) -> Row | None:
    if not any(getattr(h, "offload_buffers", False) for h in _hooks(model)):
        return None
    return replace(BUFFER_OFFLOAD, detail="verified at small scale only")


def bnb_int8(model: nn.Module, inputs: Any) -> Row | None:
    if not any(type(m).__name__ == "Linear8bitLt" for m in model.modules()):
        return None
    return replace(INT8, detail="disclosed degradation: weights are not attributed")


def bnb_4bit(model: nn.Module, inputs: Any) -> Row | None:
    if not any(type(m).__name__ == "Linear4bit" for m in model.modules()):
        return None
    return replace(FOUR_BIT, detail="disclosed degradation: dequantized values are not dense weights")


def peft_lora(model: nn.Module, inputs: Any) -> Row | None:
    from ..bridges.peft import adapter_info

    info = adapter_info(model)
    if info is None:
        return None
    detail = f"adapters {', '.join(info['adapters'])}"
    if info["types"] == ["LORA"]:
        return replace(LORA, detail=detail)
    return replace(LORA, status="not_tested", severity="warning", detail=detail,
                   evidence=f"{'/'.join(info['types'])} adapters are not tested; only LoRA is")


def gptq_awq(model: nn.Module, inputs: Any) -> Row | None:
    from ..bridges.bitsandbytes import quantization_method

    method = quantization_method(model)
    if method not in ("gptq", "awq"):
        return None
    return replace(GPTQ_AWQ, detail=f"quant_method={method}")


GRAPHED_FORWARD = ("torch.cuda.graphs", "make_graphed_callables.<locals>.make_graphed_forward.<locals>.new_fwd")


def graphed_modules(model: nn.Module) -> list[str]:
    """Addresses of modules whose instance `forward` is the one `torch.cuda.make_graphed_callables` installs."""
    found = []
    for address, m in model.named_modules():
        fwd = m.__dict__.get("forward")
        if (getattr(fwd, "__module__", None), getattr(fwd, "__qualname__", None)) == GRAPHED_FORWARD:
            found.append(address or "(root)")
    return found


def stream_capturing() -> bool:
    """True inside an active CUDA stream capture (never initialises CUDA where it is not available)."""
    return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def cuda_graphs(model: nn.Module, inputs: Any) -> Row | None:
    graphed = graphed_modules(model)
    if graphed:
        return replace(CUDA_GRAPHS, detail=f"make_graphed_callables forward on {', '.join(graphed[:6])}; "
                                           f"the capture would record the graph replay, not the ops: trace the eager model")
    if stream_capturing():
        return replace(CUDA_GRAPHS, detail="called inside an active CUDA stream capture: trace outside it")
    return None


SERVING_PACKAGES = ("vllm", "sglang")


def serving_engines(model: nn.Module, inputs: Any) -> Row | None:
    where = sorted({f"{address or '(root)'}: {module_name(m)}" for address, m in model.named_modules()
                    if module_name(m).split(".")[0] in SERVING_PACKAGES})
    if not where:
        return None
    return replace(SERVING, detail="; ".join(where[:6]) + (f" (+{len(where) - 6} more)" if len(where) > 6 else ""))


def tensor_parallel(model: nn.Module, inputs: Any) -> Row | None:
    from ..distributed.admission import distributed_findings  # the detection capture refuses with

    found = distributed_findings(model, inputs if isinstance(inputs, tuple) else ())
    if found is None:
        return None
    return replace(TENSOR_PARALLEL, detail=f"captured per rank inside a process group: {found['num_dtensors']} "
                                           f"DTensors on mesh {found['mesh']}, kinds {'/'.join(found['kinds'])}")


def moe_router_logits(model: nn.Module, inputs: Any) -> Row | None:
    experts = [m for m in model.modules() if type(m).__name__.endswith("Experts")
               and getattr(m, "gate_up_proj", None) is not None]
    if not experts:
        return None
    detail = f"{len(experts)} fused expert modules"
    if type(model).__name__ in MOE_TESTED:
        return replace(MOE, detail=detail)
    return replace(MOE, status="not_tested", severity="warning", detail=detail,
                   evidence=f"{type(model).__name__} has fused experts but is not among the tested MoE models "
                            f"(Mixtral, Qwen2-MoE, OLMoE)")


def foreign_kernels(model: nn.Module, inputs: Any) -> Row | None:
    from ..replay.interpreter import FOREIGN_DEPENDENCE

    kernels = _foreign_kernels_in(model)
    if not kernels:
        return None
    declared = sorted(k for k in FOREIGN_DEPENDENCE if any(k.endswith(n.replace("::", ".")) for n in kernels))
    return replace(FOREIGN, detail=f"{len(kernels)} foreign kernels in the model's code ({', '.join(kernels[:6])}); "
                                   f"{len(declared)} with declared dependence")


def flash_attention(model: nn.Module, inputs: Any) -> Row | None:
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None) or ""
    found = flash_packages()
    if "flash" not in impl and not found:
        return None
    where = ", ".join(f"{k} {v}" for k, v in found.items()) or "no flash-attn package installed"
    return replace(FLASH, detail=f"attn_implementation={impl or '?'}; {where}")


def flash_attention_4(model: nn.Module, inputs: Any) -> Row | None:
    from .flash4 import distributions, interface_file

    impl = getattr(getattr(model, "config", None), "_attn_implementation", None) or ""
    found = interface_file()
    if impl != "flash_attention_4" and found is None:
        return None
    where = (f"interface at {found} (distributions: {', '.join(distributions()) or 'none recorded'})"
             if found is not None else "flash_attn.cute.interface not on the search path")
    return replace(FLASH4, detail=f"attn_implementation={impl or '?'}; {where}")


def meta_structure_only(model: nn.Module, inputs: Any) -> Row | None:
    if _hooks(model) or not any(p.is_meta for p in model.parameters()):
        return None
    return replace(META, detail="structure only")


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
    """autograd Functions and torch.library custom ops defined in the modules the model's classes come from,
    and the TorchScript modules it holds (outermost only: the ones inside run within them)."""
    import sys

    from ..capture.boundaries import TRANSPARENT_PACKAGES, outside_scripts, script_name

    names = {script_name(m) for _address, m in outside_scripts(model.named_modules())
             if isinstance(m, torch.jit.ScriptModule)}
    for source in {module_name(m) for m in model.modules()}:
        if source.partition(".")[0] in TRANSPARENT_PACKAGES:
            continue
        namespace = getattr(sys.modules.get(source) if source else None, "__dict__", None)
        if not isinstance(namespace, dict):  # a class whose module is gone (or was never imported by name)
            continue
        for value in list(namespace.values()):
            if isinstance(value, type) and issubclass(value, torch.autograd.Function) \
                    and value is not torch.autograd.Function and value.__module__ == source:
                names.add(f"{source}.{value.__qualname__}")
            elif type(value).__name__ == "CustomOpDef":
                names.add(str(getattr(value, "_qualname", value)))
    return sorted(names)


# -- the ledger, in display order: every path a user asks about has a row ----------------------
DETECTORS: tuple[Detector, ...] = (
    Detector(TORCH_CAPTURE, torch_capture),
    Detector(transformers_ledger(), zoo_transformers),
    Detector(torch_nn_ledger(), zoo_torch_nn),
    Detector(DISPATCH, accelerate_dispatch),
    Detector(CPU_OFFLOAD, accelerate_cpu_offload),
    Detector(DISK_OFFLOAD, accelerate_disk_offload),
    Detector(BUFFER_OFFLOAD, accelerate_buffer_offload),
    Detector(MULTI_DEVICE, accelerate_multi_device),
    Detector(INT8, bnb_int8),
    Detector(FOUR_BIT, bnb_4bit),
    Detector(GPTQ_AWQ, gptq_awq),
    Detector(LORA, peft_lora),
    Detector(MOE, moe_router_logits),
    Detector(FOREIGN, foreign_kernels),
    Detector(FLASH, flash_attention),
    Detector(FLASH4, flash_attention_4),
    Detector(CUDA_GRAPHS, cuda_graphs),
    Detector(SERVING, serving_engines),
    Detector(TENSOR_PARALLEL, tensor_parallel),
    Detector(META, meta_structure_only),
)
