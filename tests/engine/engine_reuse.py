"""End to end: real vLLM 0.32 engines on a CPU reuse each other's KV pages across TP through
vLLM's offloading connector (`TieringOffloadingSpec`, `"canonical_layout": true`, an `fs`
secondary tier), with layoutalg's plugin on (`LAYOUTALG_VLLM=1`).

Each engine runs in a subprocess of its own (`python engine_reuse.py engine ...`; vLLM's engines
do not shut down cleanly in one process), bounded by a timeout, one at a time:

  0. (byte check) TP 2, plugin OFF, prompts P1 -> store S0 (vLLM's own derive)
  1. TP 2, plugin on, P1 and P3 -> store S: computed without reuse (no cached tokens), stored
  -  P3's files in S are then corrupted (each file's bf16 elements reversed: finite, wrong)
  2. TP 1, plugin on, fresh engine on S: P1 reused (cached tokens > 0, greedy tokens = engine 1's);
     P3 reused from the corrupted files (cached tokens > 0, tokens differ from engine 1's: the
     tokens do rest on the loaded pages); then P2 computed without reuse and stored
  3. TP 2, plugin on, fresh engine on S: P2 reused (cached tokens > 0, tokens = engine 2's)

and the files engines 0 and 1 wrote for P1 are compared byte for byte (vLLM's derive and
layoutalg's certify this model alike). Each engine's log must show layoutalg's derive in every
worker (plugin on) or nowhere (off), and S holds one folder (tp and rank left its hash) that
both TPs read and write. The model is a tiny Llama written here (seeded random weights, no
download, no tokenizer: prompts are token ids).

vLLM's CPU offloading worker does not run on vLLM's CPU build as shipped:
tests/engine/cpu_offload_shim (a test-only vLLM plugin, `LAYOUTALG_CPU_OFFLOAD_SHIM=1`) stands
in for the pieces the CPU build lacks; its docstring says which.

Run: `python tests/engine/engine_reuse.py [--no-byte-check] [--keep DIR]` (the engine venv's
python); tests/engine/test_engine_reuse.py runs it under pytest when LAYOUTALG_ENGINE_E2E=1.
Exit status 0 when every check holds; the last line printed is a JSON summary.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128,
         "vocab_size": 256, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
PROMPT_LEN = 300          # full blocks of it are stored and found again
NEW_TOKENS = 8
# A tiny pure Mamba2 (scenario "mamba2"): 2 layers of 8 heads of 16, 2 groups (both shard at TP 2),
# state 16. vLLM stores its state layers opaque; layoutalg certifies them (state layers on).
MAMBA2 = {"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 2,
          "num_heads": 8, "head_dim": 16, "expand": 2, "n_groups": 2, "state_size": 16, "conv_kernel": 4,
          "chunk_size": 16, "vocab_size": 256, "layer_norm_epsilon": 1e-5, "rms_norm": True, "use_bias": False,
          "use_conv_bias": True, "residual_in_fp32": True, "tie_word_embeddings": False, "bos_token_id": 1,
          "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "bfloat16"}
ENGINE_TIMEOUT = 240      # seconds, one engine: start, generate, let its stores land, exit (~100 s seen)


def make_model(folder: Path) -> None:
    """A tiny Llama: config.json and seeded random weights as model.safetensors (~0.5 MB)."""
    import torch
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA, indent=1))
    g = torch.Generator().manual_seed(52)
    h, inter, v, kv = LLAMA["hidden_size"], LLAMA["intermediate_size"], LLAMA["vocab_size"], (
        LLAMA["num_key_value_heads"] * LLAMA["head_dim"])
    q = LLAMA["num_attention_heads"] * LLAMA["head_dim"]

    def w(*shape, scale=0.2):
        return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)

    tensors = {"model.embed_tokens.weight": w(v, h, scale=1.0), "model.norm.weight": torch.ones(h, dtype=torch.bfloat16),
               "lm_head.weight": w(v, h)}
    for i in range(LLAMA["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update({p + "self_attn.q_proj.weight": w(q, h), p + "self_attn.k_proj.weight": w(kv, h),
                        p + "self_attn.v_proj.weight": w(kv, h), p + "self_attn.o_proj.weight": w(h, q),
                        p + "mlp.gate_proj.weight": w(inter, h), p + "mlp.up_proj.weight": w(inter, h),
                        p + "mlp.down_proj.weight": w(h, inter),
                        p + "input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
                        p + "post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16)})
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def make_mamba2(folder: Path) -> None:
    """A tiny Mamba2: config.json and seeded random weights (transformers' own Mamba2 init, with
    torch's generator seeded), saved as model.safetensors under the names vLLM's Mamba2 loads."""
    import torch
    from transformers import Mamba2Config, Mamba2ForCausalLM
    torch.manual_seed(52)
    cfg = {k: v for k, v in MAMBA2.items() if k not in ("architectures", "model_type", "torch_dtype")}
    model = Mamba2ForCausalLM(Mamba2Config(**cfg)).to(torch.bfloat16)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), safe_serialization=True)
    conf = json.loads((folder / "config.json").read_text())
    conf.update(architectures=MAMBA2["architectures"], torch_dtype="bfloat16")
    conf.pop("time_step_limit", None)  # (0, inf), written as no JSON reader takes it; both read inf by default
    (folder / "config.json").write_text(json.dumps(conf, indent=1))


def prompts(seed: int, n: int = 2) -> list[list[int]]:
    import random
    r = random.Random(seed)
    return [[r.randrange(3, LLAMA["vocab_size"]) for _ in range(PROMPT_LEN)] for _ in range(n)]


def store_files(store: Path) -> dict[str, str]:
    """The fs tier's block files under `store`: relative path -> sha256 of the bytes."""
    out = {}
    for f in sorted(store.rglob("*.bin")):
        out[str(f.relative_to(store))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


# --- one engine (in its own process) -------------------------------------------------------------

def engine(args) -> None:
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt

    t0 = time.monotonic()
    sized = {"block_size": args.block_size} if args.block_size else {}
    extra = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 32 << 20, "canonical_layout": True,
             "secondary_tiers": [{"type": "fs", "root_dir": args.store, "n_read_threads": 2, "n_write_threads": 2}]}
    llm = LLM(model=args.model, skip_tokenizer_init=True, tensor_parallel_size=args.tp,
              distributed_executor_backend="mp", enforce_eager=True, dtype=args.dtype, max_model_len=1024,
              max_num_seqs=4, seed=0, enable_prefix_caching=True, **sized,
              kv_transfer_config=KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both",
                                                  kv_connector_extra_config=extra))
    started = time.monotonic() - t0
    sp = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, detokenize=False)
    results = {"tp": args.tp, "plugin": os.environ.get("LAYOUTALG_VLLM") == "1", "start_s": round(started, 1),
               "runs": []}
    store = Path(args.store)
    for name in args.sets:
        batch = json.loads(Path(args.prompts).read_text())[name]
        before = set(store.rglob("*.bin"))
        t1 = time.monotonic()
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in batch], sp, use_tqdm=False)
        gen = time.monotonic() - t1
        # Stores reach the fs tier asynchronously (CPU tier first, then a cascade): wait until
        # the store's files stop changing, so each set's new files are known.
        settle(store, llm, sp)
        results["runs"].append({"set": name, "generate_s": round(gen, 2),
                                "tokens": [list(o.outputs[0].token_ids) for o in outs],
                                "cached": [o.num_cached_tokens for o in outs],
                                "new_files": sorted(str(f.relative_to(store)) for f in
                                                    set(store.rglob("*.bin")) - before)})
    Path(args.out).write_text(json.dumps(results))
    print(f"engine tp={args.tp}: started in {started:.1f} s, results written", flush=True)
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:
        pass
    os._exit(0)


def settle(store: Path, llm, sp, quiet_s: float = 3.0, limit_s: float = 60.0) -> None:
    from vllm.inputs import TokensPrompt
    seen, since, end = None, time.monotonic(), time.monotonic() + limit_s
    while time.monotonic() < end:
        now = len(list(store.rglob("*.bin")))
        if now != seen:
            seen, since = now, time.monotonic()
        elif now and time.monotonic() - since >= quiet_s:
            return
        # a one-token request keeps the engine's scheduler (which runs the tier cascades) stepping
        llm.generate([TokensPrompt(prompt_token_ids=[5])], sp, use_tqdm=False)
        time.sleep(0.5)


def corrupt(path: Path) -> None:
    """Reverse the file's bf16 elements in place: same size, finite values, wrong places."""
    import numpy as np
    a = np.fromfile(path, dtype=np.int16)
    a[::-1].tofile(path)


# --- the driver ----------------------------------------------------------------------------------

DERIVE_LINE = "layoutalg derives vLLM's canonical page mappings"


def run_engine(tp: int, plugin: bool, model: Path, store: Path, prompt_file: Path, sets: list[str], work: Path,
               name: str, block_size: int = 0, env_extra: dict | None = None, dtype: str = "bfloat16") -> dict:
    """One engine in a process group of its own, bounded by ENGINE_TIMEOUT; then the group is
    ended and the /dev/shm files its processes held are removed."""
    out, log, tmp = work / f"{name}.json", work / f"{name}.log", work / f"{name}-tmp"
    tmp.mkdir(exist_ok=True)  # vLLM's ipc sockets and temp files land here, removed with `work`
    env = dict(os.environ, VLLM_HOST_IP="127.0.0.1", VLLM_CPU_KVCACHE_SPACE="1", LAYOUTALG_CPU_OFFLOAD_SHIM="1",
               LAYOUTALG_VLLM="1" if plugin else "0", PYTHONHASHSEED="0", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", VLLM_CPU_OMP_THREADS_BIND="0|1" if tp == 2 else "0-1", TMPDIR=str(tmp),
               **(env_extra or {}))
    cmd = [sys.executable, str(HERE), "engine", "--tp", str(tp), "--model", str(model), "--store", str(store),
           "--prompts", str(prompt_file), "--out", str(out), "--block-size", str(block_size), "--dtype", dtype,
           "--sets", *sets]
    t0 = time.monotonic()
    shm: set[str] = set()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        rc = None
        try:
            while time.monotonic() - t0 < ENGINE_TIMEOUT:
                shm |= shm_held(p.pid)
                try:
                    rc = p.wait(timeout=2.0)
                    break
                except subprocess.TimeoutExpired:
                    pass
            shm |= shm_held(p.pid)
        finally:  # also where the driver itself is told to stop (SIGTERM)
            kill_group(p.pid)
            p.wait()
    for f in shm:
        try:
            os.unlink(f)
        except OSError:
            pass
    wall = time.monotonic() - t0
    text = log.read_text(errors="replace")
    if rc != 0 or not out.exists():
        tail = "".join(text.splitlines(True)[-60:])
        raise RuntimeError(f"engine {name} (tp={tp}, plugin {'on' if plugin else 'off'}) "
                           f"{'timed out' if rc is None else f'exited {rc}'} after {wall:.0f} s; its log ends:\n{tail}")
    r = json.loads(out.read_text())
    r["wall_s"] = round(wall, 1)
    r["workers_deriving_with_layoutalg"] = sum(1 for line in text.splitlines() if DERIVE_LINE in line and
                                               "Worker" in line.split(")")[0])
    r["all_layers_portable"] = "all_layers_portable=True" in text
    print(f"engine {name} tp={tp} plugin={'on' if plugin else 'off'}: start {r['start_s']} s, wall {r['wall_s']} s; "
          + "; ".join(f"{x['set']}: cached {x['cached']}, generate {x['generate_s']} s, {len(x['new_files'])} new "
                      f"file(s)" for x in r["runs"]), flush=True)
    return r


def group_pids(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.getpgid(int(d.name)) == pgid:
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def shm_held(pgid: int) -> set[str]:
    """The /dev/shm files the engine's processes (its process group) have open or mapped."""
    held = set()
    for pid in group_pids(pgid):
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    held.add(target.removesuffix(" (deleted)"))
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                if "/dev/shm/" in line:
                    held.add(line[line.index("/dev/shm/"):].removesuffix(" (deleted)"))
        except OSError:
            pass
    return held


def kill_group(pgid: int) -> None:
    """End the engine's process group: its engine core and workers, whatever state they are in."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not group_pids(pgid):
            return
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        for _ in range(20):
            if not group_pids(pgid):
                return
            time.sleep(0.25)


def llama_dtype() -> str:
    """The Llama engines' dtype: bfloat16, or float16 on a host with AMX, where vLLM's CPU backend
    writes bfloat16 attention (its blocks a multiple of 32 tokens) with its AMX kernel, whose blocks
    no spec describes: layoutalg keeps such layers opaque and narrows vLLM's gate, so nothing is
    reused across TP. In float16 the backend takes its vec kernel (specs/cpu_attn.lal) there too."""
    import torch
    return "float16" if torch.cpu._is_amx_tile_supported() else "bfloat16"


def llama_scenario(work: Path, a, summary: dict) -> None:
    """The tiny Llama (module docstring): engines 0-3."""
    model = work / "tiny-llama"
    make_model(model)
    prompt_file = work / "prompts.json"
    prompt_file.write_text(json.dumps({"P1": prompts(1), "P2": prompts(2), "P3": prompts(3)}))
    store, store0 = work / "store", work / "store-vllm-derive"
    res = {}
    if not a.no_byte_check:
        res["e0"] = run_engine(2, False, model, store0, prompt_file, ["P1"], work, "e0", dtype=llama_dtype())
    res["e1"] = run_engine(2, True, model, store, prompt_file, ["P1", "P3"], work, "e1", dtype=llama_dtype())
    p1_files = {k: v for k, v in store_files(store).items() if k in res["e1"]["runs"][0]["new_files"]}
    for f in res["e1"]["runs"][1]["new_files"]:
        corrupt(store / f)
    res["e2"] = run_engine(1, True, model, store, prompt_file, ["P1", "P3", "P2"], work, "e2", dtype=llama_dtype())
    res["e3"] = run_engine(2, True, model, store, prompt_file, ["P2"], work, "e3", dtype=llama_dtype())

    (a1, a3), (b1, b3, a2), (b2,) = res["e1"]["runs"], res["e2"]["runs"], res["e3"]["runs"]
    configs = [json.loads(f.read_text()) for f in store.glob("*/config.json")]
    checks = {
        "tp2_computed_without_reuse": all(c == 0 for c in a1["cached"] + a3["cached"]),
        "tp2_stored_files": len(a1["new_files"]) > 0 and len(a3["new_files"]) > 0,
        "tp1_reused_tp2": all(c > 0 for c in b1["cached"]),
        "tp1_tokens_equal_tp2": b1["tokens"] == a1["tokens"],
        "tp1_loaded_corrupted_pages": all(c > 0 for c in b3["cached"]),
        "tp1_tokens_differ_on_corrupted_pages": all(x != y for x, y in zip(b3["tokens"], a3["tokens"])),
        "tp1_computed_p2_without_reuse": all(c == 0 for c in a2["cached"]) and len(a2["new_files"]) > 0,
        "tp2_reused_tp1": all(c > 0 for c in b2["cached"]),
        "tp2_tokens_equal_tp1": b2["tokens"] == a2["tokens"],
        "one_folder_for_both_tps": len(configs) == 1 and configs[0]["tp_size"] == 1,
        "every_worker_derived_with_layoutalg": all(res[e]["workers_deriving_with_layoutalg"] == res[e]["tp"]
                                                   for e in ("e1", "e2", "e3")),
        "every_layer_portable": all(res[e]["all_layers_portable"] for e in ("e1", "e2", "e3")),
    }
    if not a.no_byte_check:
        files0 = store_files(store0)
        checks["plugin_off_derived_with_vllm"] = res["e0"]["workers_deriving_with_layoutalg"] == 0
        checks["vllm_derive_tokens_equal"] = res["e0"]["runs"][0]["tokens"] == a1["tokens"]
        # the folder's name hashes the same fields (the plugin changes no config), so paths match too
        checks["files_byte_identical_to_vllm_derive"] = bool(files0) and files0 == p1_files
        summary["files_vllm_derive"] = len(files0)
    summary.update(ok=all(checks.values()), checks=checks, files={"P1": len(a1["new_files"]),
                   "P3": len(a3["new_files"]), "P2": len(a2["new_files"])},
                   cached={"tp1_from_tp2": b1["cached"], "tp1_from_corrupted": b3["cached"],
                           "tp2_from_tp1": b2["cached"]},
                   tokens={"P1": a1["tokens"], "P2": a2["tokens"], "P3": a3["tokens"],
                           "P3_corrupted": b3["tokens"]},
                   engines={k: {"tp": v["tp"], "plugin": v["plugin"], "start_s": v["start_s"],
                                "wall_s": v["wall_s"]} for k, v in res.items()})


def mamba2_scenario(work: Path, a, summary: dict) -> None:
    """Reuse vLLM alone cannot serve: a pure Mamba2, whose state layers vLLM stores opaque and
    keys per TP. m1: TP 2, plugin on, state layers on, stores P1. m2: TP 1, plugin on, reuses it
    (cached tokens > 0, m1's greedy tokens). m0 (control): TP 1, plugin off, same store: vLLM's
    own gate keeps tp and rank in the folder's hash, so nothing is found (0 cached tokens)."""
    model = work / "tiny-mamba2"
    make_mamba2(model)
    prompt_file = work / "prompts.json"
    prompt_file.write_text(json.dumps({"P1": prompts(1)}))
    store, state = work / "store", {"LAYOUTALG_VLLM_STATE_LAYERS": "1"}
    res = {"m1": run_engine(2, True, model, store, prompt_file, ["P1"], work, "m1", 128, state),
           "m2": run_engine(1, True, model, store, prompt_file, ["P1"], work, "m2", 128, state),
           "m0": run_engine(1, False, model, store, prompt_file, ["P1"], work, "m0", 128, state)}
    a, b, c = (res[k]["runs"][0] for k in ("m1", "m2", "m0"))
    logs = {k: (work / f"{k}.log").read_text(errors="replace") for k in res}
    checks = {
        "tp2_computed_without_reuse": all(x == 0 for x in a["cached"]),
        "tp2_stored_files": len(a["new_files"]) > 0,
        "gate_widened_by_layoutalg": all("widened vLLM's parallelism-agnostic gate" in logs[k] for k in ("m1", "m2")),
        "tp1_reused_tp2": all(x > 0 for x in b["cached"]),
        "tp1_tokens_equal_tp2": b["tokens"] == a["tokens"],
        "every_layer_portable": res["m1"]["all_layers_portable"] and res["m2"]["all_layers_portable"],
        "plugin_off_no_reuse": all(x == 0 for x in c["cached"]),
        "plugin_off_gate_vllms": "widened vLLM's parallelism-agnostic gate" not in logs["m0"],
    }
    summary.update(ok=all(checks.values()), checks=checks, cached={"tp1_from_tp2": b["cached"],
                   "tp1_plugin_off": c["cached"]}, tokens={"tp2": a["tokens"], "tp1": b["tokens"],
                   "tp1_plugin_off": c["tokens"]},
                   engines={k: {"tp": v["tp"], "plugin": v["plugin"], "start_s": v["start_s"], "wall_s": v["wall_s"]}
                            for k, v in res.items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", choices=("llama", "mamba2"), default="llama",
                    help="llama: the tiny Llama both derives certify; mamba2: state layers only layoutalg certifies")
    ap.add_argument("--no-byte-check", action="store_true", help="skip engine 0 (plugin off) and the byte compare")
    ap.add_argument("--keep", help="work in this folder and keep it")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("engine_reuse.py: stopped (SIGTERM)"))
    t_all = time.monotonic()
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="layoutalg-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    summary: dict = {"ok": False, "scenario": a.scenario}
    try:
        (mamba2_scenario if a.scenario == "mamba2" else llama_scenario)(work, a, summary)
    except (Exception, SystemExit) as e:
        summary["error"] = str(e)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        summary["total_s"] = round(time.monotonic() - t_all, 1)
    print(json.dumps(summary), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "engine":
        p = argparse.ArgumentParser()
        p.add_argument("cmd")
        p.add_argument("--tp", type=int)
        p.add_argument("--model")
        p.add_argument("--store")
        p.add_argument("--prompts")
        p.add_argument("--out")
        p.add_argument("--sets", nargs="+")
        p.add_argument("--block-size", type=int, default=0)
        p.add_argument("--dtype", default="bfloat16")
        engine(p.parse_args())
    sys.exit(main())
