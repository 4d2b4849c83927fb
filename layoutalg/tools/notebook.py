"""Execute notebooks on a real Jupyter kernel (nbclient), storing their outputs.

    python -m layoutalg.tools.notebook notebooks/*.ipynb            # run each, write nothing
    python -m layoutalg.tools.notebook --inplace notebooks/*.ipynb  # and store the outputs in it

Every cell runs in order on an IPython kernel started in the repository root, so rich
outputs (pictures, tables) are real cell outputs; a cell that raises stops the run with
the cell and its traceback. The test suite executes every notebook this way, without
writing, so a notebook that no longer runs fails CI. Needs the `notebook` extra (nbclient,
nbformat, ipykernel); the runtime never imports this module.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(path: str | Path, write: bool = False, timeout: int = 600) -> list[str]:
    """Execute every code cell in order; returns each code cell's text output (streams and
    plain-text results), and with `write` stores the executed notebook in place."""
    from ..errors import optional
    nbformat = optional("nbformat", "notebook", "running a notebook")
    NotebookClient = optional("nbclient", "notebook", "running a notebook").NotebookClient
    optional("ipykernel", "notebook", "running a notebook")
    nb = nbformat.read(str(path), as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    if write:
        for k, cell in enumerate(nb.cells):  # nbformat 4.5 wants an id on every cell
            cell.setdefault("id", f"cell-{k}")
        nb.nbformat_minor = max(nb.nbformat_minor, 5)
        nbformat.write(nb, str(path))
    return [_text(cell) for cell in nb.cells if cell.cell_type == "code"]


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o.get("text", ""))
        elif "data" in o and "text/plain" in o["data"]:
            out.append(o["data"]["text/plain"] + "\n")
    return "".join(out)


def kinds(path: str | Path) -> set[str]:
    """The MIME types of every output the stored notebook holds (e.g. image/png)."""
    import nbformat
    nb = nbformat.read(str(path), as_version=4)
    return {k for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) for k in o.get("data", {})}


def main(argv: list[str]) -> int:
    from ..errors import LayoutalgError
    inplace = "--inplace" in argv
    paths = [a for a in argv if a != "--inplace"]
    if not paths or any(a.startswith("-") for a in paths):
        print("usage: python -m layoutalg.tools.notebook [--inplace] NOTEBOOK.ipynb ...", file=sys.stderr)
        return 2
    try:
        for p in paths:
            run(p, write=inplace)
            print(f"executed {p}" + (" (outputs stored in it)" if inplace else ""))
    except LayoutalgError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:  # a notebook that is not there, or not a notebook
        print(f"error: {p}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
