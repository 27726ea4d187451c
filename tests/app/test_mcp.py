"""`torchlens-explore mcp`: the MCP SDK's own client drives the server over stdio (a real subprocess)."""
from __future__ import annotations

import json
import threading
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("mcp")

import anyio  # noqa: E402  (with mcp, anyio is installed)
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

import tracer  # noqa: E402
from tests.models import tiny_gpt2  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "torchlens-explore"
TOOLS = {"open_trace", "summarize", "find_ops", "describe_op", "check_plan", "read_ladder", "doctor", "agent_document",
         "explain", "api_map"}


def run_client(command: str, args: list[str], scenario) -> None:
    """Spawn the server, open a client session on its stdio and run `scenario(call, session)`."""
    async def main() -> None:
        params = StdioServerParameters(command=command, args=args, cwd=str(ROOT))
        async with stdio_client(params) as streams, ClientSession(*streams) as session:
            await session.initialize()

            async def call(name: str, arguments: dict | None = None, *, error: bool = False) -> dict:
                result = await session.call_tool(name, arguments or {})
                assert result.is_error is error, (name, result.content)
                body = result.structured_content
                assert json.loads(result.content[0].text) == body  # the same JSON as text, for any client
                assert "ladder_state" in body, name  # every answer carries the ladder state
                return body

            await scenario(call, session)

    # its own thread and loop: a browser test earlier on this worker may hold this thread's event loop
    failure: list[BaseException] = []

    def run() -> None:
        try:
            anyio.run(main)
        except BaseException as exc:  # re-raised on the test's thread
            failure.append(exc)

    runner = threading.Thread(target=run, name="mcp-client")
    runner.start()
    runner.join()
    if failure:
        raise failure[0]


def test_every_tool_answers_on_the_8b_config_with_the_ladder_and_refusals_are_typed():
    async def scenario(call, session):
        listed = await session.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        refused = await call("summarize", error=True)  # nothing open yet
        assert refused["error"]["code"] == "no_trace_open" and refused["ladder_state"] is None

        opened = await call("open_trace", {"source": "llama-3.1-8b"})
        assert opened["ladder_state"] == "HYPOTHESIS" and opened["summary"]["model_class"] == "LlamaForCausalLM"
        assert opened["summary"]["parameters"] > 8_000_000_000

        summary = await call("summarize")
        layers = next(c for c in summary["modules"]["children"][0]["children"] if c["address"] == "model.layers")
        assert layers["children"][0]["repeat"]["count"] == 32
        assert summary["ladder"]["evidence"]["substrate"] == "meta"

        found = await call("find_ops", {"kind": "linear", "module": "model.layers.0"})
        assert found["total"] == 7 and {op["module"] for op in found["ops"]} >= {"model.layers.0.self_attn.q_proj"}
        text = await call("find_ops", {"query": "layers.3.mlp.down", "limit": 1})
        assert text["total"] >= 1 and text["ops"][0]["module"] == "model.layers.3.mlp.down_proj"
        assert text["truncated"] is (text["total"] > 1)

        op = await call("describe_op", {"site": "model.layers.0.mlp"})
        assert op["op"]["module"] == "model.layers.0.mlp.down_proj" and op["op"]["shape"] == [1, 8, 4096]
        assert set(op["parents"]) == {src for src, _ in op["op"]["parents"]}

        plan = await call("check_plan", {"plan": [
            {"site": "model.layers.0.mlp", "shape": [4096], "dtype": "bfloat16"},
            {"site": "model.layers.0.mlp", "shape": [4095], "dtype": "bfloat16"},
            {"site": "model.layers.99", "shape": [1], "dtype": "bfloat16"}]})
        assert [e["status"] for e in plan["plan"]["entries"]] == ["broadcasts", "shape_mismatch", "missing_site"]
        assert plan["plan"]["ladder_state"] == "HYPOTHESIS"

        ladder = await call("read_ladder")
        assert ladder["ladder"]["state"] == "HYPOTHESIS" and ladder["ladder"]["evidence"]["claims"]["ops"]["rows"] > 1000
        rows = await call("doctor")
        assert any(r["key"] == "meta.structure_only" and r["applies"] for r in rows["doctor"]["rows"])
        doc = await call("agent_document")
        assert doc["document"]["schema"] == "torchlens-explore.agent/1" and "ops" not in doc["document"]
        capped = (await call("agent_document", {"ops": True, "max_ops": 3}))["document"]
        assert list(capped["ops"]) == [op["label"] for op in (await call("find_ops", {"limit": 3}))["ops"]]
        assert capped["ops_omitted"]["kept"] == 3 and capped["ops_omitted"]["total"] == opened["summary"]["ops"]
        report = (await call("explain"))["explain"]
        assert report["dropped"] == [] and "LlamaForCausalLM" in report["report"] and "HYPOTHESIS" in report["report"]
        short = (await call("explain", {"max_tokens": 150}))["explain"]
        assert short["dropped"] and short["estimated_tokens"] <= 150 and "Truncation" in short["report"]
        names = {row["name"]: row for row in (await call("api_map"))["api_map"]["names"]}
        assert names["trace"]["kind"] == "function" and names["Trace"]["kind"] == "class"

        # bad arguments: typed tool errors carrying the open trace's ladder state; the server keeps answering
        for name, arguments, code in [
            ("open_trace", {"source": "/no/such/trace"}, "source_not_found"),
            ("describe_op", {"site": "no_such_op_7"}, "invalid_input"),
            ("find_ops", {"module": "model.nope"}, "invalid_input"),
            ("find_ops", {"limit": 0}, "invalid_input"),
            ("check_plan", {"plan": [{"site": "model.layers.0.mlp", "shape": "big", "dtype": "bf16"}]}, "invalid_input"),
            ("check_plan", {"plan": "not a list"}, "invalid_input"),  # refused by the input schema, typed too
            ("describe_op", {}, "invalid_input"),
            ("explain", {"max_tokens": 0}, "invalid_input"),
            ("agent_document", {"ops": True, "max_ops": 0}, "invalid_input"),
        ]:
            bad = await call(name, arguments, error=True)
            assert bad["error"]["code"] == code and bad["error"]["remedy"], (name, bad)
            assert bad["ladder_state"] == "HYPOTHESIS"
        still = await call("read_ladder")
        assert still["source"].endswith("llama-3.1-8b.json")  # a refused open leaves the open trace as it was

    run_client(str(CLI), ["mcp"], scenario)


def test_a_saved_trace_opened_at_start_over_python_m(tmp_path):
    model = tiny_gpt2()
    folder = tracer.trace(model, (torch.randint(0, 50, (1, 5)),)).save(tmp_path / "gpt2-trace")

    async def scenario(call, session):
        ladder = await call("read_ladder")
        assert ladder["ladder_state"] == ladder["ladder"]["state"] == "OBSERVED"
        assert ladder["ladder"]["evidence"]["mode"] == "eager"
        summary = await call("summarize", {"fold": False})
        assert summary["summary"]["model_class"] == "GPT2LMHeadModel"
        h = next(c for c in summary["modules"]["children"][0]["children"] if c["address"] == "transformer.h")
        assert len(h["children"]) == 2 and "repeat" not in h["children"][0]
        first = (await call("find_ops", {"limit": 1}))["ops"][0]
        assert first["kind"] == "input"
        described = await call("describe_op", {"site": first["label"]})
        assert described["op"]["saved_value"] is True and described["op"]["children"]
        plan = await call("check_plan", {"plan": [{"site": first["label"], "shape": [1, 5], "dtype": "int64"}]})
        assert plan["plan"]["ok"] is True and plan["ladder_state"] == "OBSERVED"
        no_model = await call("doctor", error=True)
        assert no_model["error"]["code"] == "invalid_input" and "config" in no_model["error"]["remedy"]
        assert (await call("agent_document", {"ops": True}))["document"]["ops"][first["label"]]["kind"] == "input"

    run_client(sys.executable, ["-m", "app.mcp_server", str(folder)], scenario)


WARM_THEN_OPEN = """
import json, sys
from app.mcp_server import AgentSession, warm_imports
done = warm_imports()
before = set(sys.modules)
session = AgentSession()
classes = [session.open(name)["summary"]["model_class"] for name in sys.argv[1:]]
first = session.find_ops(limit=1)["ops"][0]["label"]
session.summarize(), session.find_ops(query="attn"), session.describe(first), session.ladder(), session.doctor()
session.check_plan([{"site": first, "shape": [1, 8], "dtype": "int64"}]), session.document(True, 5)
session.explain(200), session.api_map()
heavy = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("torch", "transformers", "tracer"))
print(json.dumps({"done": done, "classes": classes, "imported_by_the_opens": heavy}))
"""


def test_the_warm_up_leaves_the_first_opens_no_torch_transformers_or_tracer_module_to_import():
    """`main` runs `warm_imports` before answering `initialize`; the first opens and every tool after them import
    nothing more from torch, transformers or the tracer, so they pay their capture only. A fresh process:
    this one has imported them already."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", WARM_THEN_OPEN, "llama-3.1-8b", "gpt2"], cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=300).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["classes"] == ["LlamaForCausalLM", "GPT2LMHeadModel"]
    assert {"torch", "transformers", "transformers.models.llama.modeling_llama"} <= set(result["done"])
    assert result["imported_by_the_opens"] == []
