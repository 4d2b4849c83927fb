"""Direct reshards over NIXL (`tools.nixl`), between processes on loopback: each consumer READs its
bytes straight out of the producers' registered KV memory, one transfer a (consumer, producer)
pair. Byte for byte equal to what the torch executors (gather and scatter, the torch.distributed
path's) put there, through the Python API with the metadata in a TCPStore and through
`layoutalg reshard --direct --transport nixl`; a producer that died before the read fails the
consumer in seconds, naming it.

Run as a script, this file is one peer of the Python API test (`producer` or `consumer`)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from store_servers import ROOT, free_port  # noqa: E402

MODEL = ["--heads", "4", "--head-size", "16", "--block-size", "4", "--blocks", "8", "--layers", "2"]
SRC_BLOCKS, DST_BLOCKS = [7, 0, 5, 2, 3], [1, 6, 0, 4, 7]


def _groups():
    from layoutalg.tools.distributed import group_of, parse_config
    a = group_of("split_nhd", parse_config("tp=2"), 4, 4, 16, "fp16", 8)
    b = group_of("split_nhd", parse_config("tp=4"), 4, 4, 16, "fp16", 8)
    return a, b


def _producer_kv(a, rank):
    g = torch.Generator().manual_seed(100 + rank)
    kv = a.empty()
    kv.view(torch.uint8).copy_(torch.randint(0, 256, kv.view(torch.uint8).shape, generator=g, dtype=torch.uint8))
    return kv


def _peer(role: str, port: int, folder: str) -> None:
    """One process of the API test: the producer (both tp=2 ranks' KV in one agent) or the consumer
    (all four tp=4 ranks'). Ends with os._exit (nixl-cu12 crashes at interpreter exit)."""
    from layoutalg.plans.reshard import direct_plans
    from layoutalg.tools import nixl
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=False, timeout=__import__("datetime").timedelta(
        seconds=120))
    a, b = _groups()
    plans = direct_plans(a.mappings, b.mappings)
    agent = nixl.Agent(role)
    code = 0
    try:
        if role == "producer":
            kvs = [_producer_kv(a, r) for r in range(a.world)]
            agent.register(kvs)
            nixl.publish(store, "producer", agent, {(pl.consumer, p): nixl.producer_side(pl, p, kvs[p], SRC_BLOCKS)
                                                    for pl in plans for p in pl.producers()})
            store.wait(["done"])
        else:
            kvs = [b.empty().zero_() for _ in range(b.world)]
            agent.register(kvs)
            peer, sides = nixl.fetch(store, "producer", agent)
            store.wait(["go"])
            reads, rows = 0, 0
            for pl in plans:
                for p in pl.producers():
                    src, sb = sides[(pl.consumer, p)]
                    dst, db = nixl.consumer_side(pl, p, kvs[pl.consumer], DST_BLOCKS)
                    d = nixl.descriptors(pl, p, src, dst, sb, db)
                    reads += agent.read({peer: d})
                    rows += d.shape[0]
            torch.save([kv.view(torch.uint8).clone() for kv in kvs], os.path.join(folder, "consumer.pt"))
            print(f"{reads} READs of {rows} descriptors", flush=True)
            store.set("done", "1")
    except Exception as e:  # noqa: BLE001 - said, and the process fails
        print(f"{type(e).__name__}: {e}", flush=True)
        code = 1
    finally:
        try:
            agent.close()
        except Exception:  # noqa: BLE001
            pass
    sys.stdout.flush()
    os._exit(code)


def _start(role, port, folder, **env):
    return subprocess.Popen([sys.executable, __file__, role, str(port), str(folder)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **env})


def _expected():
    """What the torch.distributed path puts in each consumer: gather on each producer, scatter on the consumer."""
    from layoutalg.copy import gather, scatter
    from layoutalg.plans.reshard import direct_plans
    a, b = _groups()
    plans = direct_plans(a.mappings, b.mappings)
    producers = [_producer_kv(a, r) for r in range(a.world)]
    out = []
    for pl in plans:
        kv = b.empty().zero_()
        for p in pl.producers():
            scatter(pl, p, gather(pl, p, producers[p], SRC_BLOCKS), kv, DST_BLOCKS)
        out.append(kv.view(torch.uint8))
    return out


@pytest.fixture
def tcpstore(only_loopback):
    port = free_port()
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    yield store, port


def test_python_api_tp2_to_tp4_equals_the_torch_executors_byte_for_byte(tcpstore, tmp_path):
    store, port = tcpstore
    producer, consumer = _start("producer", port, tmp_path), _start("consumer", port, tmp_path)
    store.set("go", "1")
    out_c = consumer.communicate(timeout=240)[0]
    out_p = producer.communicate(timeout=60)[0]
    assert consumer.returncode == 0 and producer.returncode == 0, out_c + out_p
    assert "4 READs of" in out_c, out_c  # tp=2 -> tp=4: each consumer reads one producer
    got = torch.load(tmp_path / "consumer.pt")
    want = _expected()
    assert len(got) == 4 and all(torch.equal(g, w) for g, w in zip(got, want))
    assert all(int(g.count_nonzero()) for g in got)  # (something moved: the blocks not read stay zero)


def test_a_producer_that_died_fails_the_consumer_in_seconds(tcpstore, tmp_path):
    store, port = tcpstore
    producer = _start("producer", port, tmp_path)
    consumer = _start("consumer", port, tmp_path, LAYOUTALG_NIXL_DEADLINE="10")
    store.wait(["producer"])
    time.sleep(1)
    producer.send_signal(signal.SIGKILL)
    producer.wait(timeout=30)
    t0 = time.monotonic()
    store.set("go", "1")
    out = consumer.communicate(timeout=120)[0]
    print(f"after {time.monotonic() - t0:.1f} s: {out.strip().splitlines()[-1]}")  # (shown with -rP)
    assert consumer.returncode == 1, out
    assert time.monotonic() - t0 < 30, out
    last = out.strip().splitlines()[-1]
    assert last.startswith("ConfigError: nixl: consumer's READ from producer ") and "did that process die?" in last, out
    assert not (tmp_path / "consumer.pt").exists()


def _reshard(*args, timeout=400, family="split_nhd"):
    p = subprocess.run([sys.executable, "-m", "layoutalg", "reshard", "--family", family, *MODEL, "--direct",
                        *args], cwd=ROOT, text=True, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def test_reshard_over_nixl_tp2_to_tp4_gqa_tp4_to_tp2_and_across_cp_as_over_torch():
    rc, torch_out = _reshard("--store", "tp=2", "--load", "tp=4")
    assert rc == 0 and "\n8 passed, 0 failed\n" in torch_out, torch_out
    rc, out = _reshard("--store", "tp=2", "--load", "tp=4", "--transport", "nixl")
    assert rc == 0 and "\n8 passed, 0 failed\n" in out, out
    assert "over NIXL (4 READs, one a consumer and producer pair" in out, out
    # the lines are the torch path's, but for what moved the bytes
    strip = [line for line in torch_out.splitlines() if not line.startswith(("direct:", "KV caches"))]
    assert strip == [line for line in out.splitlines() if not line.startswith(("direct:", "KV caches"))
                     and "NIXL INFO" not in line]
    # GQA: 2 KV heads at tp=4 (each held by two replicas) into tp=2
    rc, out = _reshard("--store", "tp=4", "--load", "tp=2", "--heads", "2", "--transport", "nixl")
    assert rc == 0 and "\n4 passed, 0 failed\n" in out, out
    assert "over NIXL (2 READs" in out, out  # a consumer reads one of its head's replicas
    # across another cp: the cross-cp direct plans (MLA tp=1 into tp=2,dcp=2)
    rc, out = _reshard("--store", "tp=1", "--load", "tp=2,dcp=2", "--transport", "nixl", family="mla")
    assert rc == 0 and "\n4 passed, 0 failed\n" in out and "over NIXL (2 READs" in out, out


def test_transport_nixl_needs_direct():
    p = subprocess.run([sys.executable, "-m", "layoutalg", "reshard", "--family", "split_nhd", *MODEL, "--store",
                        "tp=2", "--load", "tp=4", "--transport", "nixl"], cwd=ROOT, text=True, capture_output=True)
    assert p.returncode != 0 and "give --direct" in p.stdout + p.stderr


if __name__ == "__main__":
    _peer(sys.argv[1], int(sys.argv[2]), sys.argv[3])
