"""The README's two set-up commands: exactly two, and CI runs the second one verbatim."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def setup_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_exactly_two_setup_commands():
    cmds = setup_commands()
    assert len(cmds) == 2
    assert "torchlens-explore" in cmds[0] and "-c constraints.txt" in cmds[0]
    assert "pytest" in cmds[1] and "chromium" in cmds[1] and "-c constraints.txt" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci_lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert setup_commands()[1] in ci_lines


def test_constraints_pin_cpu_torch_and_pyproject_keeps_a_range():
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'"torch>=[\d.]+,<\d+"', pyproject)


def test_readme_python_snippets_run(tmp_path, monkeypatch):
    """Every ```python block of the README, run in order in one namespace, as a newcomer would."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - our own documentation
    assert namespace["t"].param_count() == 124_439_808
    assert namespace["s"].ladder_state == "HYPOTHESIS" and len(namespace["s"]) > 1900
    assert namespace["small"].ladder_state == "CORROBORATED"
