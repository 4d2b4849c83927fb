"""A Mooncake Store on loopback for the page store tests (fixtures in conftest.py): a master and a client that lends the
store its memory, started once, stopped (and waited for) at the end. The tests run where only
loopback is up (`.ci/stores` runs them under `unshare -n`): Mooncake's clients listen on every
interface, whatever host they are given."""
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tool(name: str) -> str:
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    assert found, f"{name} is not installed (pip install mooncake-transfer-engine-non-cuda: .ci/stores)"
    return found


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


class Master:
    """A mooncake_master on 127.0.0.1 (and with `lend`, a mooncake_client lending that many bytes)."""

    def __init__(self, folder: Path, lend: str | None = "1GB"):
        self.port, self.procs = free_port(), []
        self.address = f"127.0.0.1:{self.port}"
        log = open(folder / f"master.{self.port}.log", "w")
        self.master = self._start([tool("mooncake_master"), "-rpc_address=127.0.0.1", f"-rpc_port={self.port}",
                                   "-metrics_host=127.0.0.1", f"-metrics_port={free_port()}"], log)
        for _ in range(100):
            if _answers(self.port):
                break
            time.sleep(0.1)
        else:
            self.stop()
            raise AssertionError(f"mooncake_master did not listen on {self.port}: see {folder}")
        if lend:
            self._start([tool("mooncake_client"), "-host", "127.0.0.1", "-master_server_address", self.address,
                         "-metadata_server", "P2PHANDSHAKE", "-global_segment_size", lend, "-port",
                         str(free_port())], open(folder / f"lender.{self.port}.log", "w"))
            time.sleep(2)  # (its segment is mounted by then; a put before it finds no memory: -200)

    def _start(self, argv, log):
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def stop_master(self):
        self.master.kill()
        self.master.wait()

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
