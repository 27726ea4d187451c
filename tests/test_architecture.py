"""The direction of dependency from DESIGN.md: app -> exporters -> tracer's IR; `import tracer` needs torch alone."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
OPTIONAL = ("transformers", "accelerate", "peft", "bitsandbytes", "model_explorer", "panel", "bokeh",
            "networkx", "safetensors")


def _imports(package: str) -> dict[str, set[str]]:
    found = {}
    for path in (ROOT / package).rglob("*.py"):
        text = path.read_text()
        found[str(path.relative_to(ROOT))] = set(re.findall(r"^\s*(?:from|import)\s+([\w.]+)", text, re.M))
    return found


def test_tracer_imports_neither_exporters_nor_app():
    for path, names in _imports("tracer").items():
        assert not {n for n in names if n.split(".")[0] in ("exporters", "app")}, path


# What exporters may import of tracer (DESIGN.md): the IR and the published API, not the capture, store or claims internals.
PUBLISHED = frozenset({
    "tracer", "tracer.ir", "tracer.errors", "tracer.estimates", "tracer.module_tree", "tracer.differ",
    "tracer.atomic_write", "tracer.tensor_stats", "tracer.gc_policy", "tracer.claims",
    "tracer.backward", "tracer.backward.graph", "tracer.backward.memory", "tracer.backward.gradients",
})


def test_exporters_read_the_ir_and_the_published_api_only():
    for path, names in _imports("exporters").items():
        assert not {n for n in names if n.split(".")[0] == "app"}, path
        assert not {n for n in names if n.split(".")[0] == "tracer" and n not in PUBLISHED}, path


def _module_import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports when it is imported (module level; deferred imports excluded)."""
    import ast

    mods = {}
    for package in ("tracer", "exporters", "app"):
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        todo = list(ast.parse(path.read_text()).body)
        while todo:
            node = todo.pop()
            if isinstance(node, (ast.If, ast.Try)):  # guarded imports still run at import time
                todo += node.body + node.orelse + getattr(node, "finalbody", [])
                todo += [n for h in getattr(node, "handlers", []) for n in h.body]
            elif isinstance(node, ast.Import):
                graph[mod] |= {r for a in node.names if (r := resolve(a.name)) and r != mod}
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else node.module or ""
                for a in node.names:
                    r = resolve(f"{base}.{a.name}") if f"{base}.{a.name}" in mods else resolve(base)
                    if r and r != mod:
                        graph[mod].add(r)
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module, iteratively."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_circle_longer_than_four_modules():
    circles = _strongly_connected(_module_import_graph())
    assert all(len(c) <= 4 for c in circles), [c for c in circles if len(c) > 4]


def test_the_circle_finder_finds_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert sorted(_strongly_connected(graph)) == [["a", "b", "c"], ["e", "f"]]
    assert {"tracer.ir", "tracer.errors", "tracer.distributed"} <= _module_import_graph()["tracer"]


def test_import_tracer_needs_torch_alone():
    code = f"import sys, tracer; print([m for m in {OPTIONAL!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
