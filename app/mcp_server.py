"""`torchlens-explore mcp`: a stdio Model Context Protocol server over one open trace (docs/agent.md).

Tools: open a saved trace or a shipped/local config, summarize, find ops, describe an op, check a
plan, read the ladder, the doctor's rows, the whole agent document, a plain-language report within a
token budget, and the map of `tracer`'s public names. Every answer is the JSON of
`tracer.agent_json` and carries `ladder_state`; a refusal is a tool error whose JSON names the
tracer error's `code`, message, site and remedy, and the server goes on answering.

    python -m app.mcp_server [SOURCE]      (what `torchlens-explore mcp [SOURCE]` runs)
"""
from __future__ import annotations

import json
import sys
import threading
from typing import Any, Callable, Sequence

from tracer.agent_json import (SCHEMA, agent_json, api_map_json, doctor_json, find_op, ladder_json, module_tree_json,
                               op_json, select_ops, summary_json)
from tracer.errors import InvalidInputError, TracerError
from tracer.ir import TensorMeta

from .errors import NoTraceOpenError

FIND_LIMIT = 50  # ops listed by find_ops unless `limit` says otherwise
MAX_FIND_LIMIT = 2000
SHIPPED_KEPT = 4  # shipped-config captures kept for a reopen


class AgentSession:
    """The server's one open trace (a `app.sources.Loaded`) and its search index; calls are serialized."""

    def __init__(self) -> None:
        self.loaded: Any = None
        self.index: Any = None
        self.shipped: dict[tuple, Any] = {}  # (name, input shape) -> Loaded, for shipped configs only
        self.lock = threading.Lock()

    @property
    def trace(self) -> Any:
        if self.loaded is None:
            raise NoTraceOpenError("no trace is open in this server", site="mcp session")
        return self.loaded.trace

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """`body` with the open trace's ladder state and source in front (what every tool returns)."""
        head = {"schema": SCHEMA, "ladder_state": self.loaded.trace.ladder_state if self.loaded else None,
                "source": self.loaded.source if self.loaded else None}
        return {**head, **body}

    # -- the tools' work (plain dicts; refusals raise TracerError) ------------------------------
    def open(self, source: str, input_shape: str = "1,8") -> dict[str, Any]:
        from tracer.configs import shipped_configs

        from .search_index import SearchIndex
        from .sources import open_path, parse_shape

        if not isinstance(source, str) or not source.strip():
            raise InvalidInputError("source must name a saved trace path or a config", site="open_trace(source)")
        source, shape = source.strip(), parse_shape(input_shape)
        key = (source, shape)
        loaded = self.shipped.get(key)
        if loaded is None:
            loaded = open_path(source, shape)
            if source in shipped_configs():  # package data: the same capture every time, kept for a reopen
                self.shipped = {**dict(list(self.shipped.items())[-(SHIPPED_KEPT - 1):]), key: loaded}
        self.loaded, self.index = loaded, SearchIndex(loaded.trace.ops)
        return self.answer({"opened": loaded.title, "origin": loaded.origin, "summary": summary_json(loaded.trace)})

    def summarize(self, fold: bool = True) -> dict[str, Any]:
        trace = self.trace
        return self.answer({"summary": summary_json(trace), "ladder": ladder_json(trace),
                            "modules": module_tree_json(trace, fold=fold)})

    def find_ops(self, query: str = "", kind: str = "", module: str = "", label: str = "",
                 limit: int = FIND_LIMIT) -> dict[str, Any]:
        trace = self.trace
        if not isinstance(limit, int) or not 1 <= limit <= MAX_FIND_LIMIT:
            raise InvalidInputError(f"limit {limit!r} is not in [1, {MAX_FIND_LIMIT}]", site="find_ops(limit)")
        if module and module not in trace.modules:
            raise InvalidInputError(f"no module at {module!r} in this trace", site="find_ops(module)",
                                    remedy="Name a module address from summarize's module tree, e.g. model.layers.0.mlp.")
        if label:
            found = [find_op(trace, label)]
        else:
            positions = self.index.matching(query.lower()) if query else None
            found = select_ops(trace, kind=kind or None, module=module or None, positions=positions)
        return self.answer({"total": len(found), "truncated": len(found) > limit,
                            "ops": [op_json(trace, op) for op in found[:limit]]})

    def describe(self, site: str) -> dict[str, Any]:
        trace = self.trace
        op = find_op(trace, site)
        parents = {e.source: op_json(trace, trace[e.source]) for e in op.parents}
        return self.answer({"op": op_json(trace, op, detail=True), "parents": parents})

    def check_plan(self, plan: Sequence[Any]) -> dict[str, Any]:
        trace = self.trace
        entries = [(_plan_site(item, i), _plan_meta(item, i)) for i, item in enumerate(_plan_list(plan))]
        report = trace.check_plan(entries)
        return self.answer({"plan": report.to_dict()})

    def ladder(self) -> dict[str, Any]:
        return self.answer({"ladder": ladder_json(self.trace)})

    def doctor(self) -> dict[str, Any]:
        self.trace  # noqa: B018 - refuses when nothing is open
        if self.loaded.model is None:
            raise InvalidInputError("the doctor inspects a model; this trace was opened from a file, without one",
                                    site="doctor", remedy="Open a config (e.g. llama-3.1-8b) to run the doctor on its "
                                                          "meta model, or run tracer.doctor(model) in Python.")
        return self.answer({"doctor": doctor_json(self.loaded.model)})

    def document(self, ops: bool = False, max_ops: int | None = None) -> dict[str, Any]:
        return self.answer({"document": agent_json(self.trace, ops=bool(ops), max_ops=max_ops)})

    def explain(self, max_tokens: int | None = None) -> dict[str, Any]:
        from tracer.plain_report import explanation

        return self.answer({"explain": explanation(self.trace, max_tokens).to_dict()})

    def api_map(self) -> dict[str, Any]:
        return self.answer({"api_map": api_map_json()})


def _plan_list(plan: Any) -> list:
    if not isinstance(plan, (list, tuple)):
        raise InvalidInputError("a plan is a list of {site, shape, dtype} entries", site="check_plan(plan)")
    return list(plan)


def _plan_site(item: Any, i: int) -> str:
    if not isinstance(item, dict) or not isinstance(item.get("site"), str):
        raise InvalidInputError(f"plan entry {i} has no site", site=f"check_plan(plan[{i}])",
                                remedy='Write each entry as {"site": "model.layers.0.mlp", "shape": [1, 8, 4096], '
                                       '"dtype": "bfloat16"}.')
    return item["site"]


def _plan_meta(item: dict, i: int) -> TensorMeta:
    shape, dtype = item.get("shape"), item.get("dtype")
    if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
            and isinstance(dtype, str) and dtype):
        raise InvalidInputError(f"plan entry {i} needs a shape (list of non-negative ints) and a dtype name",
                                site=f"check_plan(plan[{i}])", remedy='e.g. {"shape": [4096], "dtype": "bfloat16"}')
    return TensorMeta(tuple(shape), dtype.removeprefix("torch."), "meta")


# -- the MCP surface -------------------------------------------------------------------------------
def _result(session: AgentSession, work: Callable[[], dict[str, Any]]) -> Any:
    """Run one tool's work under the session lock: its JSON, or a tool error carrying the refusal."""
    with session.lock:
        try:
            return _tool_result(work(), failed=False)
        except TracerError as exc:
            return _refusal(session, exc)
        except Exception as exc:  # a bug, not a refusal: named, and the server keeps answering
            return _tool_result(session.answer({"error": {
                "code": "internal_error", "message": f"{type(exc).__name__}: {exc}", "site": None,
                "remedy": "Please report this.", "findings": {}}}), failed=True)


def _refusal(session: AgentSession, exc: TracerError) -> Any:
    return _tool_result(session.answer({"error": exc.to_dict()}), failed=True)


def _tool_result(body: dict[str, Any], failed: bool) -> Any:
    from mcp.types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=json.dumps(body))], structured_content=body,
                          is_error=failed)


def build_server(session: AgentSession | None = None) -> Any:
    """The MCP server with its tools over `session` (a new one by default); each tool returns `_result`'s
    CallToolResult (its JSON as text and as structured content)."""
    from mcp.server.mcpserver import MCPServer

    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError

    class Server(MCPServer):
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            """Arguments the input schema rejects (or an unknown tool) answer as a typed refusal too."""
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                if isinstance(exc, UnexpectedToolError):
                    raise
                cause = exc.__cause__
                return _refusal(s, InvalidInputError(str(cause) if cause is not None else str(exc), site=f"tool {name}",
                                                     remedy="Call the tool with the arguments its input schema names "
                                                            "(list_tools)."))

    s = session or AgentSession()
    server = Server("torchlens-explore", instructions=(
        "Open a trace (open_trace: a saved trace path, or a config such as llama-3.1-8b, weights-free), then "
        "summarize, find_ops, describe_op, check_plan, read_ladder, explain. Every answer carries ladder_state: shapes of a "
        "HYPOTHESIS trace are unproven until discharged against a real capture."))

    @server.tool()
    def open_trace(source: str, input_shape: str = "1,8"):
        """Open a saved trace (folder, trace.json, .zip) or a config (shipped name like llama-3.1-8b, or a config
        JSON path; captured weights-free on the meta device at input_shape batch,sequence)."""
        return _result(s, lambda: s.open(source, input_shape))

    @server.tool()
    def summarize(fold: bool = True):
        """Model class, op and parameter counts, ladder state and evidence, and the module tree
        (repeated blocks folded unless fold is false)."""
        return _result(s, lambda: s.summarize(fold))

    @server.tool()
    def find_ops(query: str = "", kind: str = "", module: str = "", label: str = "",
                 limit: int = FIND_LIMIT):
        """Ops in execution order: label (an op label or module path, exactly), or query (text in label or
        module path), kind (e.g. linear, or a function name), module (inside this module address); at most limit."""
        return _result(s, lambda: s.find_ops(query, kind, module, label, limit))

    @server.tool()
    def describe_op(site: str):
        """One op by label, module path (its call's output, `path:1` for the second call) or module/label:
        shape, dtype, parents, consumers, parameters, module stack, source line."""
        return _result(s, lambda: s.describe(site))

    @server.tool()
    def check_plan(plan: list[dict[str, Any]]):
        """Audit planned interventions [{site, shape, dtype}] against the trace's shapes (nothing runs):
        each entry fits, broadcasts, or is a missing site / shape or dtype mismatch."""
        return _result(s, lambda: s.check_plan(plan))

    @server.tool()
    def read_ladder():
        """The ladder state (OBSERVED, HYPOTHESIS, CORROBORATED, REFUTED), its meaning and evidence (envelope
        fields, claim table counts and digests, discharge record)."""
        return _result(s, s.ladder)

    @server.tool()
    def doctor():
        """The doctor's deployment-path rows for the open config's model (status, severity, evidence)."""
        return _result(s, s.doctor)

    @server.tool()
    def agent_document(ops: bool = False, max_ops: int | None = None):
        """The whole agent JSON document (schema torchlens-explore.agent/1); ops adds every op by label, or the
        first max_ops in execution order (ops_omitted then says how many were left out)."""
        return _result(s, lambda: s.document(ops, max_ops))

    @server.tool()
    def explain(max_tokens: int | None = None):
        """A plain-language report of the open trace (capture status, size, module tree, op kinds, evidence);
        max_tokens (estimated as characters / 4) drops whole sections from the end and names them, never the
        capture status."""
        return _result(s, lambda: s.explain(max_tokens))

    @server.tool()
    def api_map():
        """Every public name of the Python package `tracer`: kind, defining module, first docstring line."""
        return _result(s, s.api_map)

    return server


def warm_imports() -> list[str]:
    """Import what opening a shipped config and the tools after it need (torch, transformers, the modeling
    module of every shipped config's model type, the tracer's capture, replay, doctor, module-tree and
    report modules, the module of every public name of `tracer`, the sources and the search index), so
    that the first `open_trace` of a config pays its capture only. `main` runs it before the server answers `initialize`: every tool then answers from
    the moment the server is up, and the imports count as startup (docs/agent.md). A module that fails to
    import is skipped (the open that needs it refuses typed, as it would have). Returns the modules imported."""
    import importlib
    import json as _json

    names = ["torch", "transformers", "tracer.tracing", "tracer.replay.validate", "tracer.bridges.transformers",
             "tracer.bridges.accelerate", "tracer.bridges.bitsandbytes", "tracer.bridges.peft", "tracer.compat.doctor",
             "tracer.compat.rows", "tracer.compat.zoo", "tracer.module_tree", "tracer.claims.plan",
             "app.sources", "app.search_index"]
    try:
        from tracer.configs import shipped_configs

        for path in shipped_configs().values():
            kind = str(_json.loads(path.read_text()).get("model_type", "")).replace("-", "_")
            if kind.isidentifier():
                names.append(f"transformers.models.{kind}.modeling_{kind}")
    except Exception:  # noqa: BLE001 - warming is an optimisation; the open reports any real problem
        pass
    done = []
    for name in dict.fromkeys([*names, "tracer.plain_report"]):
        try:
            importlib.import_module(name)
            done.append(name)
        except Exception:  # noqa: BLE001 - as above
            continue
    try:
        api_map_json()  # imports the module of every public name of tracer, which the api_map tool lists
        done.append("tracer.__all__")
    except Exception:  # noqa: BLE001 - as above
        pass
    return done


def main(argv: Sequence[str] | None = None) -> int:
    """Serve over stdio until the client closes; a SOURCE given is opened first (a refusal exits 2)."""
    import argparse

    p = argparse.ArgumentParser(prog="torchlens-explore mcp", description="Serve a trace to coding agents over MCP (stdio).")
    p.add_argument("source", nargs="?", help="a saved trace or config to open before serving (default: none)")
    p.add_argument("--input-shape", default="1,8", help="batch,sequence for a config (default 1,8)")
    p.add_argument("--no-warm-imports", action="store_true",
                   help="serve before importing transformers and the shipped models' modules; the first open "
                        "pays them (benchmarks)")
    ns = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        import mcp  # noqa: F401
    except ImportError:
        from .errors import FeatureUnavailableError

        raise FeatureUnavailableError("the MCP server needs the mcp package, which is not installed", site="mcp",
                                      remedy="pip install 'torchlens-explore[agent]'") from None
    session = AgentSession()
    if ns.source:
        session.open(ns.source, ns.input_shape)
    elif not ns.no_warm_imports:
        warm_imports()  # before `initialize` is answered: startup, not the first call, pays the imports
    build_server(session).run("stdio")
    return 0


if __name__ == "__main__":  # through the CLI, so a refusal prints as the CLI's do
    from app.cli import main as cli_main

    raise SystemExit(cli_main(["mcp", *sys.argv[1:]]))
