"""A page stored by one job is loaded by another: each side a torchrun job of its own (here two
simulated nodes on one machine, env:// rendezvous), the pages in files on a shared path."""
import os
import socket
import subprocess
import sys

from conftest import ROOT

MODEL = ["--family", "split_hnd", "--heads", "4", "--head-size", "16", "--block-size", "4", "--blocks", "4",
         "--layers", "3"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _job(pages, side: str, config: str, nodes: int = 2, per_node: int = 1):
    """Run one job as `nodes` torchrun invocations on this machine; (exit codes, outputs)."""
    port = _port()
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes),
                               "--node-rank", str(k), "--nproc-per-node", str(per_node), "--master-addr", "localhost",
                               "--master-port", str(port), "-m", "layoutalg", "reshard", *MODEL, f"--{side}", config,
                               "--pages", str(pages)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
             for k in range(nodes)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    return [p.returncode for p in procs], "".join(outs)


def test_two_jobs_on_two_nodes_each_store_and_load_through_files(tmp_path):
    rc, out = _job(tmp_path, "store", "tp=2")
    assert rc == [0, 0], out
    assert "stored: tp=2,pcp=1,dcp=1,interleave=1,pcp_replicas=0, 3 layers x 4 pages of 1024 bytes" in out, out
    (folder,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    assert sorted(p.name for p in folder.iterdir()) == ["job.json", "layer0.pages", "layer1.pages", "layer2.pages"]
    rc, out = _job(tmp_path, "load", "tp=1,pp=2")  # another job, two pipeline stages of one rank
    assert rc == [0, 0], out
    assert "in 2 pipeline stages, 3 layers x 4 pages, from pages stored by tp=2" in out, out
    assert out.strip().splitlines()[-1] == "3 passed, 0 failed" or "\n3 passed, 0 failed\n" in out, out
    # one byte of one stored page changed: the load job says which layer failed and exits 1
    with open(folder / "layer1.pages", "r+b") as f:
        f.seek(1000)
        b = f.read(1)
        f.seek(1000)
        f.write(bytes([b[0] ^ 0xFF]))
    rc, out = _job(tmp_path, "load", "tp=4", nodes=2, per_node=2)
    assert 1 in rc and "11 passed, 1 failed" in out, out  # 4 ranks x 3 layers: the rank holding byte 1000
    # a record naming another format in this format's folder: neither a store nor a load touches it
    record = folder / "job.json"
    record.write_text(record.read_text().replace(folder.name, "another-format"))
    for side in ("store", "load"):
        rc, out = _job(tmp_path, side, "tp=2", nodes=1, per_node=2)
        assert rc != [0] and "holds pages of format another-format" in out, out


def test_a_job_outside_torchrun_is_refused(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "reshard", *MODEL, "--store", "tp=2", "--pages",
                           str(tmp_path)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 2 and "run it under torchrun" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "reshard", *MODEL, "--store", "tp=2"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 2 and "give both --store and --load" in proc.stderr, proc.stderr
