"""Derivation speed: whole models (cold and warm) and the public corpus.

    python benchmarks/derive_bench.py

Per model, in a fresh process (median of 3): importing layoutalg, loading the
compiled spec library (precompiled cache; the first run ever compiles it, several
seconds), deriving all 80 layers (cold: the first layer derives, the other 79 hit the memo),
and deriving them again (warm); and the whole process's wall time over a bare interpreter's
(`python -c pass`, measured beside it), the figure to hold against the reference's.
Run it with the package installed as users install it (a wheel: its bytecode is compiled
at install; an editable checkout under PYTHONDONTWRITEBYTECODE compiles every module at
every start).
"""
from __future__ import annotations

import io
import statistics
import subprocess
import tempfile
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "vllm_reference.jsonl.gz"

MODELS = {
    "split NHD tp=8, 8 KV heads": dict(layout="split_nhd", tp=8, pcp=1, total=8, bs=16, d=128, e=2),
    "split HND tp=8 pcp=2, 64 KV heads": dict(layout="split_hnd", tp=8, pcp=2, total=64, bs=16, d=128, e=2),
    "packed NHD tp=4, 8 KV heads": dict(layout="packed_nhd", tp=4, pcp=1, total=8, bs=16, d=128, e=2),
    "MLA tp=8, 576-wide bf16 latent": dict(layout="mla", tp=8, pcp=1, total=1, bs=64, d=576, e=2),
}

_CHILD = r"""
import sys, time  # (no json here: its import would be counted as the process's)
t0 = time.perf_counter()
import layoutalg
from layoutalg import Deriver, LayerSpec, ParallelConfig, TensorLayout
t_import = time.perf_counter()
Deriver()                # loads the compiled spec library (from the cache after the first run)
t_load = time.perf_counter()
cfg = {k: (v if k == "layout" else int(v)) for k, v in (a.split("=") for a in sys.argv[1:])}
def model():
    tp, total, bs, d, e = cfg["tp"], cfg["total"], cfg["bs"], cfg["d"], cfg["e"]
    h = max(1, total // tp)
    if cfg["layout"] == "mla":
        layer, tensor = LayerSpec("mla", bs * d * e, bs, 1, d, e), None
    else:
        page = 2 * bs * h * d * e
        el = {"split_nhd": (2 * bs * h * d, bs * h * d, h * d, d, 1), "split_hnd": (2 * bs * h * d, bs * h * d, d, bs * d, 1),
              "packed_nhd": (2 * bs * h * d, 2 * d, h * 2 * d, 1)}[cfg["layout"]]
        shape = (1000, 2, bs, h, d) if cfg["layout"].startswith("split") else (1000, h, bs, 2 * d)
        layer, tensor = LayerSpec("attention", page, bs, h, d, e), TensorLayout(shape, el, e)
    return [(layer, tensor) for _ in range(80)]
layers = model()
par = ParallelConfig(tp=cfg["tp"], pcp=cfg["pcp"], total_kv_heads=cfg["total"])
t1 = time.perf_counter()
deriver = Deriver()
for layer, tensor in layers:
    r = deriver.derive(layer, tensor, par, 1000)
    assert r.result == "certified", r.reasons
t2 = time.perf_counter()
for layer, tensor in layers:
    deriver.derive(layer, tensor, par, 1000)
t3 = time.perf_counter()
print(t_import - t0, t_load - t_import, t2 - t1, t3 - t2, sum(len(m.runs) for m in r.mappings))
"""


def _timed(args: list) -> tuple[float, str]:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as here:  # a folder of its own: the installed layoutalg, not one by cwd
        out = subprocess.run([sys.executable, *args], capture_output=True, text=True, check=True, cwd=here).stdout
    return time.perf_counter() - t0, out


def bench_model(cfg: dict) -> dict:
    runs = []
    for _ in range(3):
        bare, _ = _timed(["-c", "pass"])
        wall, out = _timed(["-c", _CHILD, *(f"{k}={v}" for k, v in cfg.items())])
        runs.append({**dict(zip(("import", "load", "derive", "warm", "runs"), map(float, out.split()))),
                     "process": wall - bare})
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def bench_corpus() -> tuple[float, float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "layoutalg.cli", "derive-corpus", str(CORPUS)],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    from layoutalg.runtime.corpus import derive_corpus
    from layoutalg.runtime.derive import Deriver
    Deriver()
    t1 = time.perf_counter()
    n = derive_corpus(str(CORPUS), io.StringIO())
    return wall, time.perf_counter() - t1, n, len(proc.stdout.splitlines())


def main() -> None:
    print("| model (80 identical layers) | import layoutalg | load compiled specs | derive, cold | "
          "derive, warm | whole process over a bare one | runs per rank |")
    print("|---|---|---|---|---|---|---|")
    total = {"import": 0.0, "load": 0.0, "derive": 0.0, "warm": 0.0, "process": 0.0}
    for name, cfg in MODELS.items():
        r = bench_model(cfg)
        for k in total:
            total[k] += r[k]
        print(f"| {name} | {r['import'] * 1e3:.0f} ms | {r['load'] * 1e3:.1f} ms | {r['derive'] * 1e3:.2f} ms | "
              f"{r['warm'] * 1e3:.2f} ms | {r['process'] * 1e3:.0f} ms | {r['runs']:.0f} |")
    print(f"| all four | {total['import'] * 1e3:.0f} ms | {total['load'] * 1e3:.1f} ms | "
          f"{total['derive'] * 1e3:.2f} ms | {total['warm'] * 1e3:.2f} ms | {total['process'] * 1e3:.0f} ms | |")
    wall, in_proc, n, lines = bench_corpus()
    print(f"\n| public corpus ({n} layers) | time |\n|---|---|")
    print(f"| `layoutalg derive-corpus`, whole process, output included | {wall:.2f} s |")
    print(f"| derivation + JSON in a warm process (one worker per core) | {in_proc:.2f} s |")


if __name__ == "__main__":
    main()
