"""A CI-sized sample of the feature sweep, rerun: each cell's classification must match results.json.

A cell whose result or code differs from the committed one fails (a regression, or a change nobody
recorded: rerun `python -m tests.features.sweep` and commit the results). Separately, sampled cells
recorded as neither untyped nor silent must not have become either. One test, so the sample's cells
(each in a fresh forked process, two at a time) run once even under pytest-xdist.
"""
from __future__ import annotations

import json
from pathlib import Path

from tests.features.cells import run_cell
from tests.zoo.runner import run_tasks

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = (("eager_mlp", "capture"), ("eager_mlp", "save_load_validate"), ("eager_mlp", "weights_free"),
          ("compile_eager", "capture"), ("hop_cond", "capture"), ("sparse_coo_small", "capture"),
          ("fake_tensor_mode", "capture"), ("dispatch_subclass", "save_load_validate"),
          ("global_hooks", "capture"), ("module_hooks", "validate"), ("nested_trace", "capture"),
          ("two_threads", "capture"),
          # cells fixed in the replay and the weights-free capture (issue 35): autocast, inference mode, fp8,
          # jagged nested tensors, flex attention
          ("autocast_cpu_bf16", "save_load_validate"), ("autocast_cpu_bf16", "weights_free"),
          ("inference_mode", "save_load_validate"), ("fp8_e4m3fn", "validate"), ("nested_jagged", "validate"),
          ("flex_attention", "validate"))
BAD = ("untyped", "silent")


def test_sampled_cells_match_the_committed_results_and_honest_cells_stay_honest():
    recorded = {(c["case"], c["column"]): c
                for c in json.loads((ROOT / "tests" / "features" / "results.json").read_text())["cells"]}
    rows = dict(zip(SAMPLE, run_tasks([(run_cell, cell) for cell in SAMPLE], workers=2, limit_s=300.0, fresh=True)))
    crashed = {cell: row["error"] for cell, row in rows.items() if "error" in row}
    assert not crashed, crashed
    changed = {".".join(cell): f"now {row['result']} {row.get('code')} ({row.get('reason', '')}); results.json: "
                               f"{recorded[cell]['result']} {recorded[cell].get('code')}"
               for cell, row in rows.items()
               if (row["result"], row.get("code")) != (recorded[cell]["result"], recorded[cell].get("code"))}
    became_bad = {".".join(cell): row for cell, row in rows.items()
                  if recorded[cell]["result"] not in BAD and row["result"] in BAD}
    assert not became_bad, f"sampled cells recorded honest are now untyped or silent: {became_bad}"
    assert not changed, f"sampled cells differ from tests/features/results.json: {changed}"
