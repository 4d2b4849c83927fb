"""Canonical pages in a Mooncake Store: one torchrun job of one configuration puts them, jobs of
others get and load them, every byte checked by the engine element it holds; and what fails,
fails in words, in seconds."""
import signal
import subprocess
import sys
import time

import pytest
import torch

from store_servers import ROOT, Master, free_port

MODEL = ["--heads", "4", "--head-size", "16", "--block-size", "4", "--blocks", "4", "--layers", "3"]
MAMBA = [f"--size={n}={v}" for n, v in dict(conv_kernel=4, conv_bytes=2, ssm_bytes=4, ssm_heads=8, ssm_head_dim=4,
                                              state_size=2, n_groups=1).items()]


def job(master: str, side: str, config: str, *args, nodes: int = 1, per_node: int = 1, family="split_nhd",
        model=None, timeout=300):
    """One side as a torchrun job (`nodes` torchrun invocations on this machine): (exit codes, output, seconds)."""
    port, t0 = free_port(), time.monotonic()
    argv = ["-m", "layoutalg", "reshard", "--family", family, *args, f"--{side}", config, "--store-backend",
            "mooncake", "--mooncake-master", master, *(["--model", model] if model else [])]
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node-rank",
                               str(k), "--nproc-per-node", str(per_node), "--master-addr", "127.0.0.1",
                               "--master-port", str(port), *argv],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
             for k in range(nodes)]
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    return [p.returncode for p in procs], "".join(outs), time.monotonic() - t0


def passed(out: str, n: int) -> bool:
    return f"\n{n} passed, 0 failed\n" in out


def test_attention_stored_at_tp2_loads_at_tp4_and_tp1(mooncake, client):
    rc, out, _ = job(mooncake.address, "store", "tp=2", *MODEL, nodes=2, model="attn")
    assert rc == [0, 0], out
    assert "3 layers x 4 pages of 1024 bytes into the Mooncake Store at " + mooncake.address in out, out
    rc, out, _ = job(mooncake.address, "load", "tp=4", *MODEL, nodes=2, per_node=2, model="attn")
    assert rc == [0, 0] and passed(out, 12), out  # 4 ranks x 3 layers, every byte
    rc, out, _ = job(mooncake.address, "load", "tp=1", *MODEL, model="attn")
    assert rc == [0] and passed(out, 3) and "from pages stored by tp=2" in out, out
    # the pages are whole canonical pages under their keys, and the record names them
    from layoutalg.tools.stores import PageKey
    rec = client.stored("attn", client_format(out_of=client, model="attn"))
    pages = torch.empty(4, 1024, dtype=torch.uint8)
    client.get(PageKey("attn", rec["format_id"], rec["job"], 2), range(4), pages)
    assert int(pages.count_nonzero()) > 3500  # (hashes: a zero page, or a half written one, would show)
    # one byte of one page changed in the store: the tp=4 load says which rank and layer failed
    pages[1, 1000] ^= 0xFF
    raw = client.raw()
    key = PageKey("attn", rec["format_id"], rec["job"], 2).page(1)
    assert raw.upsert(key, pages[1].numpy().tobytes()) == 0
    rc, out, _ = job(mooncake.address, "load", "tp=4", *MODEL, per_node=4, model="attn")
    assert rc == [1] and "\n11 passed, 1 failed\n" in out, out


def client_format(out_of, model: str) -> str:
    import json
    return json.loads(bytes(out_of.raw().get(out_of.record_key(model))))["format_id"]


def test_mla_with_dcp_and_mamba2_state(mooncake):
    mla = ["--heads", "1", "--head-size", "8", "--block-size", "4", "--blocks", "4", "--layers", "2"]
    rc, out, _ = job(mooncake.address, "store", "tp=2,dcp=2,interleave=2", *mla, per_node=2, family="mla")
    assert rc == [0], out
    rc, out, _ = job(mooncake.address, "load", "tp=4,dcp=2,interleave=2", *mla, per_node=4, family="mla")
    assert rc == [0] and passed(out, 8) and "converted" not in out, out
    # no dcp: pages of 4 tokens, each big page stored under dcp=2 two of them (converted on the way in)
    rc, out, _ = job(mooncake.address, "load", "tp=1", *mla, family="mla")
    assert rc == [0] and passed(out, 2), out
    assert "converted: 4 pages of 128 bytes a layer, stored by tp=2,pcp=1,dcp=2,interleave=2" in out, out
    assert "into 8 pages of 64 bytes" in out and "2 layers x 8 pages" in out, out
    states = [*MAMBA, "--blocks", "4", "--layers", "2"]
    rc, out, _ = job(mooncake.address, "store", "tp=4", *states, per_node=4, family="mamba2")
    assert rc == [0], out
    for config, ranks in (("tp=2", 2), ("tp=1,pp=2", 2)):  # (pp=2: two stages of one rank, a layer each)
        rc, out, _ = job(mooncake.address, "load", config, *states, per_node=ranks, family="mamba2")
        assert rc == [0] and passed(out, 4 if ranks == 2 and config == "tp=2" else 2), out


def test_mla_stored_at_tp2_loads_at_tp4_dcp2_through_a_conversion(mooncake, client):
    """Pages of another cp: the record of the tp=2 job names its format and sizes; the load job
    of tp=4,dcp=2 (pages of twice the tokens) makes one conversion, proved at the two sizes, on
    its first rank, and each rank joins two stored pages into one of its own before it loads."""
    mla = ["--heads", "1", "--head-size", "8", "--block-size", "4", "--blocks", "4", "--layers", "2"]
    rc, out, _ = job(mooncake.address, "store", "tp=2", *mla, per_node=2, family="mla", model="mla-cp")
    assert rc == [0], out
    rec = client.record("mla-cp")
    assert rec["sizes"]["dcp"] == 1 and rec["layout_id"] and rec["pages"] == 4, rec
    rc, out, _ = job(mooncake.address, "load", "tp=4,dcp=2", *mla, nodes=2, per_node=2, family="mla",
                     model="mla-cp")
    assert rc == [0, 0] and passed(out, 8), out  # 4 ranks x 2 layers, every byte by its engine element
    assert out.count("converted: ") == 1, out  # (one conversion for the job, made on its first rank)
    assert (f"converted: 4 pages of 64 bytes a layer, stored by tp=2,pcp=1,dcp=1,interleave=1,pcp_replicas=0 "
            f"(format {rec['format_id']}), into 2 pages of 128 bytes") in out, out
    assert "2 small pages a big one along 't'" in out and "proved at these sizes" in out, out
    assert "2 layers x 2 pages, from pages stored by tp=2" in out, out
    # one byte of one stored page changed: the rank that holds it after the conversion fails it
    from layoutalg.tools.stores import PageKey
    key = PageKey("mla-cp", rec["format_id"], rec["job"], 1)
    page = torch.empty(1, 64, dtype=torch.uint8)
    client.get(key, [3], page)
    page[0, 5] ^= 0xFF
    assert client.raw().upsert(key.page(3), page[0].numpy().tobytes()) == 0
    rc, out, _ = job(mooncake.address, "load", "tp=2,dcp=2", *mla, per_node=2, family="mla", model="mla-cp")
    assert rc == [1] and "\n3 passed, 1 failed\n" in out, out


def test_another_format_is_refused_and_a_missing_page_is_named(mooncake, client):
    rc, out, _ = job(mooncake.address, "store", "tp=2", *MODEL, per_node=2, model="fmt")
    assert rc == [0], out
    other = [*MODEL[:2], "--head-size", "32", *MODEL[4:]]  # another head size: another page format
    rc, out, seconds = job(mooncake.address, "load", "tp=1", *other, model="fmt")
    stored = client_format(client, "fmt")
    # one family and canonical layout, pages of other sizes: a conversion is tried and refused, naming both
    assert rc == [1] and f"holds pages of model fmt in format {stored} (stored by tp=2," in out, out
    assert "), not lal" in out and "and they do not convert: " in out and "nothing was read" in out, out
    assert "converted:" not in out and "passed" not in out, out
    rec = client.stored("fmt", client_format(client, "fmt"))
    from layoutalg.tools.stores import PageKey
    key = PageKey("fmt", rec["format_id"], rec["job"], 1).page(3)
    assert client.raw().remove(key, True) == 0
    rc, out, _ = job(mooncake.address, "load", "tp=2", *MODEL, per_node=2, model="fmt")
    assert rc == [1] and f"page {key} is not in the Mooncake Store at {mooncake.address} (not found)" in out, out
    assert "passed" not in out, out  # no rank went on to load what it had


KILLED = r"""
import os, sys, torch
from layoutalg.tools.mooncake import MooncakeStore
from layoutalg.tools.stores import PageKey
s = MooncakeStore(sys.argv[1], host="127.0.0.1")
pages = torch.full((1, 64 << 20), 7, dtype=torch.uint8)
for i in range(1000):
    print("start", i, flush=True)
    s.put(PageKey("killed", "f", "j", 0), [i], pages)
    print("done", i, flush=True)
"""


def test_a_client_killed_mid_put_leaves_no_page_a_loader_takes(mooncake, client, tmp_path):
    from layoutalg.tools.stores import PageKey
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-c", KILLED, mooncake.address], stdout=open(out, "w"),
                         stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        for _ in range(600):
            if "start 2" in out.read_text():
                break
            time.sleep(0.05)
        time.sleep(0.05)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    lines = out.read_text().split()
    started = [int(n) for w, n in zip(lines, lines[1:]) if w == "start"]
    done = {int(n) for w, n in zip(lines, lines[1:]) if w == "done"}
    assert started and done, out.read_text()
    key = PageKey("killed", "f", "j", 0)
    page = torch.empty(1, 64 << 20, dtype=torch.uint8)
    for i in started:
        if i in done:  # a whole page: every byte
            client.get(key, [i], page)
            assert bool((page == 7).all())
        else:  # the page in flight when the writer died: not found, never a part of it
            with pytest.raises(Exception, match=f"page {key.page(i)} is not in"):
                client.get(key, [i], page)
    for i in done:
        client.raw().remove(key.page(i), True)


def test_a_wrong_master_or_a_master_that_is_down_fails_in_seconds(only_loopback, tmp_path):
    from layoutalg.errors import ConfigError
    from layoutalg.tools.mooncake import MooncakeStore
    nobody = f"127.0.0.1:{free_port()}"
    rc, out, seconds = job(nobody, "store", "tp=2", *MODEL, per_node=2)
    assert rc == [1] and f"no master at {nobody}" in out and seconds < 60, out  # (most of it torchrun and torch)
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=f"no master at {nobody}"):
        MooncakeStore(nobody)
    assert time.monotonic() - t0 < 5
    m = Master(tmp_path, lend="64MB")
    try:
        s = MooncakeStore(m.address, host="127.0.0.1")
        from layoutalg.tools.stores import PageKey
        key = PageKey("down", "f", "j", 0)
        s.put(key, [0], torch.ones(1, 4096, dtype=torch.uint8))
        m.stop_master()
        for call in (lambda: s.put(key, [1], torch.ones(1, 4096, dtype=torch.uint8)),
                     lambda: s.get(key, [0], torch.empty(1, 4096, dtype=torch.uint8)),
                     lambda: s.stored("down", "f")):
            t0 = time.monotonic()
            with pytest.raises(ConfigError, match="mooncake: .*(did not answer|not in|could not|failed)"):
                call()
            assert time.monotonic() - t0 < 20
        s.close()
    finally:
        m.stop()
