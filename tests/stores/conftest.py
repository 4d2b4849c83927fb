"""Fixtures of the page store tests (`.ci/stores`, LAYOUTALG_STORES=1): a Mooncake Store on
loopback for the session (`store_servers.Master`), and a client of it."""
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from store_servers import Master  # noqa: E402


@pytest.fixture(scope="session")
def only_loopback():
    up = [n for _, n in socket.if_nameindex() if n != "lo"]  # (this network namespace's)
    assert not up, (f"the store tests start servers that listen on every interface: run them where only loopback "
                    f"is up (bash .ci/stores runs them under unshare -n); here also: {', '.join(up)}")


@pytest.fixture(scope="session")
def mooncake(only_loopback, tmp_path_factory):
    m = Master(tmp_path_factory.mktemp("mooncake"))
    yield m
    m.stop()


@pytest.fixture
def client(mooncake):
    from layoutalg.tools.mooncake import MooncakeStore
    s = MooncakeStore(mooncake.address, host="127.0.0.1")
    yield s
    s.close()
