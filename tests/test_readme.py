"""The README stays true: its self-contained example runs, and its two set-up commands are the
ones CI runs."""
import re

from conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_the_readme_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    runnable = [b for b in blocks if "import torch" in b and "assert" in b]
    assert len(runnable) == 1, "the README has one self-contained example"
    exec(compile(runnable[0], "README.md", "exec"), {})


def test_the_readme_gives_the_two_set_up_commands_ci_runs():
    setup = README.split("## Set up and run", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```\n(.*?)\n```", setup, re.S)
    assert commands == ['pip install torch==2.13.0 -e . && layoutalg check specs/ && layoutalg prove specs/',
                        'pip install torch==2.13.0 -e ".[test]" && python -m pytest -q']
    ci = (ROOT / ".ci" / "run").read_text()
    assert "torch==2.13.0" in ci and '-e ".[test]"' in ci and "pytest -q" in ci
