"""The package's imports: no module reaches back to one that imports it (lazy imports count),
and loading the runtime with a warm cache imports none of the modules it keeps off its path."""
import ast
import os
import subprocess
import sys

from conftest import ROOT

PACKAGE = ROOT / "layoutalg"


def _modules() -> dict:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def _edges(mods: dict) -> dict:
    edges = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = pkg
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                target = f"{base}.{node.module}" if node.module else base
                for a in node.names:
                    hit = f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target
                    if hit in mods and hit not in (m, "layoutalg"):
                        edges[m].add(hit)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                edges[m] |= {n for n in names if n in mods and n not in (m, "layoutalg")}
    return edges


def circles(edges: dict) -> list:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_one_that_imports_it():
    edges = _edges(_modules())
    assert sum(len(e) for e in edges.values()) > 100  # the control: the imports were read
    assert circles(edges) == []
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # it finds one


def test_the_runtime_loads_without_the_tools_it_keeps_off_its_path(tmp_path):
    """A fresh process with a warm cache derives from bytecode found by the spec folder's index:
    no parser, no algebra, no solver, and none of the standard modules the start-up avoids."""
    code = ("import sys\nbefore = set(sys.modules)  # (an editable install's finder brings some at start-up)\n"
            "import layoutalg\nlayoutalg.Deriver()\n"
            "print(' '.join(sorted(m for m in ('dataclasses', 'typing', 'pathlib', 'json', 'hashlib', 'ast', 'lark',"
            " 'sympy', 'z3', 'torch', 'layoutalg.compile.whitelist', 'layoutalg.runtime.vllm') if m in set(sys.modules) - before)))\n")
    env = {**os.environ, "LAYOUTALG_CACHE": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                           cwd=tmp_path).stdout.split() for _ in range(3)]
    assert "lark" in runs[0] and "sympy" in runs[0]  # the control: compiling the library imports them
    assert runs[2] == [], runs  # (the second may hash the files once more, to write the index)


ORDER = ("", "algebra", "dsl", "ir", "compile", "runtime", "plans", "copy", "verify", "tools", "cli")
"""The package's folders in pipeline order (docs/design.md): each imports only those before it."""


def _floor(module: str, mods: dict) -> int:
    parts = module.split(".")[1:]
    if not parts or (len(parts) == 1 and mods[module].name != "__init__.py"):
        return 0  # the top level
    return ORDER.index(parts[0])


def upward(edges: dict, mods: dict) -> list:
    """(importer, imported) where a module imports from a later folder of the pipeline."""
    return sorted((a, b) for a, bs in edges.items() for b in bs
                  if a not in ALIASES and _floor(b, mods) > _floor(a, mods))


ALIASES = ("layoutalg.__main__", "layoutalg.vllm")
"""Top-level modules that only name another: `python -m layoutalg`, and the vLLM adapter's old path."""


def test_the_folders_are_the_pipeline_and_no_module_imports_upward():
    mods = _modules()
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders == set(ORDER[1:]), folders  # every folder has its place in the order
    assert upward(_edges(mods), mods) == []
    fake = {"layoutalg.runtime.derive": PACKAGE / "runtime" / "derive.py", "layoutalg.verify.check": PACKAGE / "x.py"}
    assert upward({"layoutalg.runtime.derive": {"layoutalg.verify.check"}}, fake) == [
        ("layoutalg.runtime.derive", "layoutalg.verify.check")]  # it finds one
    assert not any(b.startswith("layoutalg.copy") for a, bs in _edges(mods).items() if a.startswith(
        "layoutalg.verify") for b in bs)  # what verify proves is the plan, never the bytes a copy moved


def test_few_modules_at_the_top_and_none_too_long():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 10, top
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_crossings(mods: dict, root=ROOT) -> tuple:
    """(file, line, dotted name) of every private name (one leading underscore) a module of the
    package imports from another, or reads as an attribute of one it imported (`from . import
    obligations` then `obligations._prod`), a private module's among them; and, apart, the private
    names of other packages it reaches (`torch._C`), which are theirs to keep."""
    ours, theirs = [], []
    for m, p in sorted(mods.items()):
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        tree = ast.parse(p.read_text())
        where = str(p.relative_to(root))
        bound = {}  # a local name -> the module it names

        def note(line, dotted):
            (ours if dotted.split(".")[0] == "layoutalg" else theirs).append((where, line, dotted))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = pkg
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
                if any(_private(part) for part in target.split(".")):
                    note(node.lineno, target)
                for a in node.names:
                    if f"{target}.{a.name}" in mods:
                        bound[a.asname or a.name] = f"{target}.{a.name}"
                    if _private(a.name) and target != m:
                        note(node.lineno, f"{target}.{a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if any(_private(part) for part in a.name.split(".")):
                        note(node.lineno, a.name)
                    bound[a.asname or a.name.partition(".")[0]] = a.name if a.asname else a.name.partition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                chain, v = [node.attr], node.value
                while isinstance(v, ast.Attribute):
                    chain.append(v.attr)
                    v = v.value
                if isinstance(v, ast.Name) and v.id in bound and bound[v.id] != m:
                    note(node.lineno, ".".join([bound[v.id], *reversed(chain)]))
    return sorted(set(ours)), sorted(set(theirs))


THEIRS = {("layoutalg/tools/nixl.py", "os._exit"), ("layoutalg/tools/vllm_writers.py", "vllm._custom_ops")}
"""Other packages' private names the package reaches: `os._exit` (a child that must not run the
parent's exit handlers) and vLLM's kernels' module. Theirs to keep, listed to be seen."""


def test_no_module_reaches_another_modules_private_names(tmp_path):
    mods = _modules()
    ours, theirs = private_crossings(mods)
    assert ours == [], "\n".join(f"{f}:{line}: {name}" for f, line, name in ours)
    assert {(f, name) for f, _, name in theirs} <= THEIRS, theirs
    assert len(theirs) >= 1  # the control: the walk saw the imports and the attributes
    # it finds one of each kind: a name imported, a private module, an attribute of a module imported
    pkg = tmp_path / "layoutalg"
    (pkg / "sub").mkdir(parents=True)
    for f in ("__init__.py", "_hidden.py", "sub/__init__.py", "sub/a.py"):
        (pkg / f).write_text("")
    (pkg / "sub" / "b.py").write_text("from .a import _x, y\nfrom .. import _hidden\nfrom . import a\n"
                                      "import torch._C\n\n\ndef _own():\n    return a._z, a.w, _own, torch._C\n")
    fake = {"layoutalg": pkg / "__init__.py", "layoutalg._hidden": pkg / "_hidden.py",
            "layoutalg.sub": pkg / "sub/__init__.py", "layoutalg.sub.a": pkg / "sub/a.py", "layoutalg.sub.b": pkg / "sub/b.py"}
    found, other = private_crossings(fake, tmp_path)
    assert found == [("layoutalg/sub/b.py", 1, "layoutalg.sub.a._x"), ("layoutalg/sub/b.py", 2, "layoutalg._hidden"),
                     ("layoutalg/sub/b.py", 8, "layoutalg.sub.a._z")], found
    assert other == [("layoutalg/sub/b.py", 4, "torch._C"), ("layoutalg/sub/b.py", 8, "torch._C")], other
