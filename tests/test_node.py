"""A page stored by one job is loaded by another: each side a torchrun job of its own (here two
simulated nodes on one machine, env:// rendezvous), the pages in files on a shared path."""
import json
import re
import os
import socket
import subprocess
import sys

import pytest

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


def test_two_jobs_on_two_nodes_each_store_and_load_through_files(tmp_path, monkeypatch, threads):
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
    # (each a job of one rank in this process, of this format: the page store refuses before a page moves)
    from layoutalg.errors import ConfigError
    from layoutalg.tools.distributed import group_of, parse_config
    from layoutalg.tools.node import load_job, store_job
    record = folder / "job.json"
    record.write_text(record.read_text().replace(folder.name, "another-format"))
    one = group_of("split_hnd", parse_config("tp=1"), 4, 4, 16, "bf16", 4)  # MODEL at tp=1: the same format
    assert one.mappings[0].format_id == folder.name
    for side, job in (("store", store_job), ("load", load_job)):
        _alone(monkeypatch)
        with pytest.raises(ConfigError, match=f"reshard {side} job: .* holds pages of format another-format"):
            job(one, (range(3),), 3, str(tmp_path))


def test_a_job_outside_torchrun_is_refused(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "reshard", *MODEL, "--store", "tp=2", "--pages",
                           str(tmp_path)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 2 and "run it under torchrun" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "reshard", *MODEL, "--store", "tp=2"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 2 and "give both --store and --load" in proc.stderr, proc.stderr


def _alone(monkeypatch):
    """This process as a job of one rank (torchrun's env:// variables, a fresh port each job)."""
    for k, v in dict(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_port())).items():
        monkeypatch.setenv(k, v)


@pytest.fixture
def threads():
    """A job sets torch's threads to 1 (a rank a core): given back to the tests after it."""
    import torch
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_a_load_job_converts_pages_of_another_block_size_in_a_file_store(tmp_path, monkeypatch, capsys, threads):
    """Stored in pages of 4 tokens, loaded by jobs of 8-token and 2-token blocks: the record names
    the stored format and sizes, the load job converts (proved at the two sizes) and checks every
    byte by its engine element; a byte changed in the store fails; another head size is refused."""
    from layoutalg.errors import ConfigError
    from layoutalg.tools.distributed import group_of, parse_config
    from layoutalg.tools.node import load_job, store_job

    def group(block_size, blocks, head_size=16):
        return group_of("split_hnd", parse_config("tp=1"), 4, block_size, head_size, "bf16", blocks)

    def load(g, **kw):
        _alone(monkeypatch)
        return load_job(g, (range(2),), 2, str(tmp_path), prove=True, **kw)

    _alone(monkeypatch)
    assert store_job(group(4, 4), (range(2),), 2, str(tmp_path)) == 0
    (folder,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    record = json.loads((folder / "job.json").read_text())
    assert record["sizes"]["block_size"] == 4 and record["layout_id"] and record["page_bytes"] == 1024
    capsys.readouterr()
    assert load(group(8, 2)) == 0  # 4 stored pages of 4 tokens are 2 of 8
    out = capsys.readouterr().out
    assert f"converted: 4 pages of 1024 bytes a layer, stored by tp=1,pcp=1,dcp=1,interleave=1,pcp_replicas=0 " \
           f"(format {folder.name}), into 2 pages of 2048 bytes" in out, out
    assert "\n2 passed, 0 failed\n" in out, out
    assert load(group(2, 8)) == 0  # and 8 of 2 tokens
    out = capsys.readouterr().out
    assert "into 8 pages of 512 bytes" in out and "\n2 passed, 0 failed\n" in out, out
    # a group of the stored count of blocks: the CLI regroups; the Python API says how many it needs
    assert load(group(8, 4), regroup=lambda n: group(8, n)) == 0
    with pytest.raises(ConfigError, match="are 2 pages of this job's format, but its group holds 3 blocks"):
        load(group(8, 3), regroup=lambda n: group(8, n))
    # the engine's way (the API's default): the conversion rests on the record `layoutalg prove` keeps
    from layoutalg.tools.distributed import library_of
    from layoutalg.verify.conversions import record as prove_record
    assert prove_record(library_of(None), "split_hnd") is None
    capsys.readouterr()
    _alone(monkeypatch)
    assert load_job(group(8, 2), (range(2),), 2, str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "resting on the proof record" in out and "\n2 passed, 0 failed\n" in out, out
    # a byte changed in a stored page: the converted page holds it, and the byte check fails that layer
    with open(folder / "layer1.pages", "r+b") as f:
        f.seek(3 * 1024 + 100)
        b = f.read(1)
        f.seek(3 * 1024 + 100)
        f.write(bytes([b[0] ^ 0xFF]))
    capsys.readouterr()
    assert load(group(8, 2)) == 1
    assert "\n1 passed, 1 failed\n" in capsys.readouterr().out
    # another head size: same family and canonical layout, pages that are not parts of one another
    with pytest.raises(ConfigError, match=f"holds pages of model split_hnd in format {folder.name} .*, not "
                                          f"lal.* and they do not convert: .*; nothing was read"):
        load(group(8, 2, head_size=32))
    # a record whose format id is damaged (a store that hands back what it holds, unread): refused
    # naming the store and the record, nothing read
    from layoutalg.tools.node import _may_convert
    from layoutalg.tools.stores import FileStore
    for bad in ("lal3-damaged", None, 7):
        with pytest.raises(ConfigError, match=f"they do not convert: the record's format id is damaged "
                                              f".*{re.escape(repr(bad))} is not a page format id.*; nothing was read"):
            _may_convert(group(8, 2), (), FileStore(str(tmp_path)), "split_hnd", dict(record, format_id=bad))
