"""End to end: real vLLM 0.32 engines on a CPU reuse each other's KV pages across TP through
vLLM's offloading connector (`TieringOffloadingSpec`, `"canonical_layout": true`, an `fs`
secondary tier), with layoutalg's plugin on (`LAYOUTALG_VLLM=1`).

Each engine runs in a subprocess of its own (`python engine_reuse.py engine ...`; vLLM's engines
do not shut down cleanly in one process), bounded by a timeout, one at a time:

  0. (byte check) TP 2, plugin OFF, prompts P1 -> store S0 (vLLM's own derive)
  1. TP 2, plugin on, P1 -> store S: computed without reuse (no cached tokens), stores P1
  2. TP 1, plugin on, fresh engine on S: P1 reused (cached tokens > 0, greedy tokens = engine 1's);
     then P2 computed without reuse and stored
  3. TP 2, plugin on, fresh engine on S: P2 reused (cached tokens > 0, tokens = engine 2's)

and the files engines 0 and 1 wrote for P1 are compared byte for byte (vLLM's derive and
layoutalg's certify this model alike). The model is a tiny Llama written here (seeded random
weights, no download, no tokenizer: prompts are token ids).

vLLM's CPU offloading worker does not run on vLLM's CPU build as shipped:
tests/engine/cpu_offload_shim (a test-only vLLM plugin, `LAYOUTALG_CPU_OFFLOAD_SHIM=1`) stands
in for the pieces the CPU build lacks; its docstring says which.

Run: `python tests/engine/engine_reuse.py [--no-byte-check] [--keep DIR]` (the engine venv's
python); tests/engine/test_engine_reuse.py runs it under pytest when LAYOUTALG_ENGINE_E2E=1.
Exit status 0 when every check holds; the last line printed is a JSON summary.
"""
from __future__ import annotations

import argparse
import glob
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
ENGINE_TIMEOUT = 420      # seconds, one engine: start, generate, let its stores land, exit


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
    extra = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 32 << 20, "canonical_layout": True,
             "secondary_tiers": [{"type": "fs", "root_dir": args.store, "n_read_threads": 2, "n_write_threads": 2}]}
    llm = LLM(model=args.model, skip_tokenizer_init=True, tensor_parallel_size=args.tp,
              distributed_executor_backend="mp", enforce_eager=True, dtype="bfloat16", max_model_len=1024,
              max_num_seqs=4, seed=0, enable_prefix_caching=True,
              kv_transfer_config=KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both",
                                                  kv_connector_extra_config=extra))
    started = time.monotonic() - t0
    sp = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, detokenize=False)
    results = {"tp": args.tp, "plugin": os.environ.get("LAYOUTALG_VLLM") == "1", "start_s": round(started, 1),
               "runs": []}
    for name in args.sets:
        batch = json.loads(Path(args.prompts).read_text())[name]
        t1 = time.monotonic()
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in batch], sp, use_tqdm=False)
        results["runs"].append({"set": name, "generate_s": round(time.monotonic() - t1, 2),
                                "tokens": [list(o.outputs[0].token_ids) for o in outs],
                                "cached": [o.num_cached_tokens for o in outs]})
    # Stores reach the fs tier asynchronously (CPU tier first, then a cascade): wait until the
    # store's files stop changing.
    settle(Path(args.store), llm, sp)
    results["files"] = len(store_files(Path(args.store)))
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


# --- the driver ----------------------------------------------------------------------------------

def run_engine(tp: int, plugin: bool, model: Path, store: Path, prompt_file: Path, sets: list[str], out: Path,
               log: Path) -> dict:
    env = dict(os.environ, VLLM_HOST_IP="127.0.0.1", VLLM_CPU_KVCACHE_SPACE="1", LAYOUTALG_CPU_OFFLOAD_SHIM="1",
               LAYOUTALG_VLLM="1" if plugin else "0", PYTHONHASHSEED="0", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", VLLM_CPU_OMP_THREADS_BIND="0|1" if tp == 2 else "0-1",
               VLLM_ENABLE_V1_MULTIPROCESSING="1")
    cmd = [sys.executable, str(HERE), "engine", "--tp", str(tp), "--model", str(model), "--store", str(store),
           "--prompts", str(prompt_file), "--out", str(out), "--sets", *sets]
    t0 = time.monotonic()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=ENGINE_TIMEOUT)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            kill_group(p.pid)
    wall = time.monotonic() - t0
    if rc != 0 or not out.exists():
        tail = "".join(log.read_text(errors="replace").splitlines(True)[-60:])
        raise RuntimeError(f"engine tp={tp} plugin={plugin} {'timed out' if rc is None else f'exited {rc}'} "
                           f"after {wall:.0f} s; its log ends:\n{tail}")
    r = json.loads(out.read_text())
    r["wall_s"] = round(wall, 1)
    print(f"engine tp={tp} plugin={'on' if plugin else 'off'}: start {r['start_s']} s, wall {r['wall_s']} s, "
          + "; ".join(f"{x['set']}: cached {x['cached']}, generate {x['generate_s']} s" for x in r["runs"]),
          flush=True)
    return r


def kill_group(pgid: int) -> None:
    """End the engine's process group (its engine core and workers), then what vLLM leaves in /dev/shm."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        time.sleep(1.0)


def shm_now() -> set[str]:
    return set(glob.glob("/dev/shm/*"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-byte-check", action="store_true", help="skip engine 0 (plugin off) and the byte compare")
    ap.add_argument("--keep", help="work in this folder and keep it")
    a = ap.parse_args(argv)
    t_all = time.monotonic()
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="layoutalg-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    shm_before = shm_now()
    summary: dict = {"ok": False}
    try:
        model = work / "tiny-llama"
        make_model(model)
        prompt_file = work / "prompts.json"
        prompt_file.write_text(json.dumps({"P1": prompts(1), "P2": prompts(2)}))
        store, store0 = work / "store", work / "store-vllm-derive"
        res = {}
        if not a.no_byte_check:
            res["e0"] = run_engine(2, False, model, store0, prompt_file, ["P1"], work / "e0.json", work / "e0.log")
        res["e1"] = run_engine(2, True, model, store, prompt_file, ["P1"], work / "e1.json", work / "e1.log")
        files_tp2 = store_files(store)
        res["e2"] = run_engine(1, True, model, store, prompt_file, ["P1", "P2"], work / "e2.json", work / "e2.log")
        res["e3"] = run_engine(2, True, model, store, prompt_file, ["P2"], work / "e3.json", work / "e3.log")

        a1, b1 = res["e1"]["runs"][0], res["e2"]["runs"][0]
        a2, b2 = res["e2"]["runs"][1], res["e3"]["runs"][0]
        checks = {
            "tp2_computed_without_reuse": all(c == 0 for c in a1["cached"]),
            "tp2_stored_files": len(files_tp2) > 0,
            "tp1_reused_tp2": all(c > 0 for c in b1["cached"]),
            "tp1_tokens_equal_tp2": b1["tokens"] == a1["tokens"],
            "tp1_computed_p2_without_reuse": all(c == 0 for c in a2["cached"]),
            "tp2_reused_tp1": all(c > 0 for c in b2["cached"]),
            "tp2_tokens_equal_tp1": b2["tokens"] == a2["tokens"],
        }
        if not a.no_byte_check:
            files0 = store_files(store0)
            checks["vllm_derive_tokens_equal"] = res["e0"]["runs"][0]["tokens"] == a1["tokens"]
            # the folder names hash the same fields (the plugin changes no config), so paths match too
            checks["files_byte_identical_to_vllm_derive"] = bool(files0) and files0 == files_tp2
            summary["files_vllm_derive"] = len(files0)
        summary.update(ok=all(checks.values()), checks=checks, files_tp2=len(files_tp2),
                       cached={"tp1_from_tp2": b1["cached"], "tp2_from_tp1": b2["cached"]},
                       tokens={"P1": a1["tokens"], "P2": a2["tokens"]},
                       engines={k: {"tp": v["tp"], "plugin": v["plugin"], "start_s": v["start_s"],
                                    "wall_s": v["wall_s"]} for k, v in res.items()})
    except Exception as e:
        summary["error"] = str(e)
    finally:
        for f in shm_now() - shm_before:  # what the engines left (their offload regions, queues)
            if os.path.basename(f).startswith(("vllm", "psm_", "sem.", "torch_")):
                try:
                    os.unlink(f)
                except OSError:
                    pass
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
        engine(p.parse_args())
    sys.exit(main())
