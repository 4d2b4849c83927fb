"""Run a notebook's code cells in one namespace and store their printed output.

    python -m layoutalg.notebook notebooks/01_tour.ipynb

Enough to keep the tour executed and honest without a Jupyter kernel: the test suite
runs every notebook this way, so a notebook that no longer runs fails CI.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path


def run(path: str | Path, write: bool = True) -> list[str]:
    """Execute every code cell in order; returns (and optionally stores) each cell's output."""
    nb = json.loads(Path(path).read_text())
    namespace: dict = {"__name__": "__notebook__"}
    outputs = []
    count = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        count += 1
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile("".join(cell["source"]), f"{path}[cell {count}]", "exec"), namespace)
        text = buf.getvalue()
        outputs.append(text)
        cell["execution_count"] = count
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": text.splitlines(True)}] if text else []
    if write:
        Path(path).write_text(json.dumps(nb, indent=1) + "\n")
    return outputs


if __name__ == "__main__":
    for p in sys.argv[1:]:
        run(p)
        print(f"executed {p}")
