"""Canonical pages in a Mooncake Store (`mooncake-transfer-engine-non-cuda`, `pip install
layoutalg[mooncake]`): a master that keeps the key table, and clients that put and get.

A job's processes are clients that lend no memory (`segment=0`): the pages outlive the job
only in memory that a long-lived client lends, such as `mooncake_client
-global_segment_size 4GB` on each node (docs/moving-bytes.md#page-stores). Keys are
`PageKey.page` names; a store job's pages are new keys (its job name is in them), and the
model's record, `layoutalg/MODEL/record` (JSON: format_id, job, layers, pages, page_bytes,
...), is upserted to name them only after every page is in. A client killed mid-put leaves
an object Mooncake never completes (it is not found, and the master discards it) and no
record naming it; the record still names the last whole job.

Every call that can wait on the master is bounded: the master's address is tried with a
plain TCP connect first (`timeout` seconds), and the client's setup runs in a thread given
`timeout` seconds more, so a wrong address or a master that is down is an error in seconds.
The `mooncake` module is imported here only, inside `MooncakeStore`.
"""
from __future__ import annotations

import json
import socket
import threading

import torch

from ..errors import ConfigError
from .stores import PageKey, PageStore, check_pages

CODES = {-200: "no memory to put into: no client lends a segment (start mooncake_client -global_segment_size ...)",
         -703: "not complete (its writer has not finished, or died)", -704: "not found",
         -706: "leased (being read)", -900: "the master did not answer (RPC failed: is it down?)"}
"""Mooncake's error codes this module meets, in words."""

CHUNK = 256  # keys a batch call


def _parse(master: str) -> tuple[str, int]:
    host, sep, port = master.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"mooncake: master address {master!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def reachable(master: str, timeout: float = 3.0) -> str:
    """This host's address on the way to `master` (the address a client announces), or a
    `ConfigError` within `timeout` seconds where nothing answers there."""
    host, port = _parse(master)
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            return s.getsockname()[0]
    except OSError as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise ConfigError(f"mooncake: no master at {master} ({why} within {timeout:g} s): start one with "
                          f"mooncake_master -rpc_address=HOST -rpc_port=PORT, or give its --mooncake-master") from None


def _bounded(call, timeout: float, what: str):
    """`call()` in a thread, waited for `timeout` seconds: its result, or a `ConfigError` saying `what` hung."""
    box = {}

    def run():
        try:
            box["out"] = call()
        except BaseException as e:  # noqa: BLE001 - given back to the caller
            box["err"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise ConfigError(f"mooncake: {what} did not answer within {timeout:g} s")
    if "err" in box:
        raise box["err"]
    return box["out"]


class MooncakeStore(PageStore):
    """A client of the Mooncake Store master at `master` ('HOST:PORT').

    `host`: the address this client announces (default: its address on the route to the
    master); `segment`: bytes of memory it lends the store (default 0: a job's pages must
    outlive it in a long-lived client's memory); `buffer`: its local transfer buffer;
    `protocol`: 'tcp' (or 'rdma', with `devices`); `metadata`: the metadata service
    ('P2PHANDSHAKE': none, clients exchange it directly); `timeout`: seconds any call that
    waits on the master is given."""

    name = "mooncake"

    def __init__(self, master: str, host: str | None = None, segment: int = 0, buffer: int = 64 << 20,
                 protocol: str = "tcp", devices: str = "", metadata: str = "P2PHANDSHAKE", timeout: float = 10.0):
        self.master, self.timeout = master, float(timeout)
        local = reachable(master, min(self.timeout, 3.0))
        try:
            from mooncake.store import MooncakeDistributedStore
        except ImportError as e:
            raise ConfigError(f"mooncake: the Mooncake Store client is not installed ({e}): pip install "
                              f"'layoutalg[mooncake]' (mooncake-transfer-engine-non-cuda; it needs libibverbs1)") from None
        self.client = MooncakeDistributedStore()
        rc = _bounded(lambda: self.client.setup(host or local, metadata, int(segment), int(buffer), protocol, devices,
                                                master), self.timeout, f"the master at {master} (client setup)")
        if rc != 0:
            raise ConfigError(f"mooncake: a client of the master at {master} did not start (setup returned {rc})")
        self.registered = {}  # data_ptr -> bytes registered for direct puts and gets

    def where(self) -> str:
        return f"the Mooncake Store at {self.master}"

    def _register(self, t: torch.Tensor) -> None:
        ptr, n = t.data_ptr(), t.numel() * t.element_size()
        if self.registered.get(ptr, 0) >= n:
            return
        rc = self.client.register_buffer(ptr, n)
        if rc != 0:
            raise ConfigError(f"mooncake: could not register {n} bytes of pages with the client (code {rc})")
        self.registered[ptr] = n

    def _call(self, what: str, call):
        return _bounded(call, self.timeout + 5.0, f"{what} at {self.master}")

    def _batches(self, key: PageKey, page_ids, pages: torch.Tensor, what: str, call, ok):
        """Each batch of at most CHUNK pages through `call(names, addresses, sizes)` (row i of
        `pages` is page `page_ids[i]`), registered first. Returns None where every code passes
        `ok`, else (the first refused page's key, its code, how many more that batch refused)."""
        ids = check_pages(key, page_ids, pages)
        n, base = pages.shape[1], pages.data_ptr()
        self._register(pages)
        for at in range(0, len(ids), CHUNK):
            names = [key.page(p) for p in ids[at:at + CHUNK]]
            got = self._call(what, lambda: call(names, [base + (at + i) * n for i in range(len(names))],
                                                [n] * len(names)))
            bad = [(k, rc) for k, rc in zip(names, got) if not ok(rc)]
            if bad:
                return bad[0] + (len(bad) - 1,)
        return None

    def put(self, key: PageKey, page_ids, pages: torch.Tensor) -> None:
        bad = self._batches(key, page_ids, pages, "a put", self.client.batch_put_from, lambda rc: rc == 0)
        if bad:
            k, rc, more = bad
            raise ConfigError(f"mooncake: put of {k} into {self.where()} failed: {CODES.get(rc, f'code {rc}')}"
                              + (f" (and {more} more pages)" if more else ""))

    def get(self, key: PageKey, page_ids, out: torch.Tensor) -> None:
        n = out.shape[1] if out.dim() == 2 else None
        bad = self._batches(key, page_ids, out, "a get", self.client.batch_get_into, lambda rc: rc == n)
        if bad:
            k, rc, more = bad
            why = CODES.get(rc, f"code {rc}") if rc < 0 else f"{rc} bytes, not a page of {n}"
            raise ConfigError(f"mooncake: page {k} is not in {self.where()} ({why})"
                              + (f"; nor are {more} more" if more else ""))

    def record_key(self, model: str) -> str:
        return f"layoutalg/{model}/record"

    def commit(self, model: str, record: dict) -> None:
        data = json.dumps(record).encode()
        rc = self._call("the record's upsert", lambda: self.client.upsert(self.record_key(model), data))
        if rc != 0:
            raise ConfigError(f"mooncake: the record of {model} could not be written to {self.where()}: "
                              f"{CODES.get(rc, f'code {rc}')}")

    def stored(self, model: str, format_id: str, side: str = "load") -> dict | None:
        record = self.record(model, side)
        if record is not None and record["format_id"] != format_id:
            raise ConfigError(f"reshard {side} job: {self.where()} holds pages of model {model} in format "
                              f"{record['format_id']}, not {format_id}: nothing was read")
        return record

    def find(self, model: str, format_id: str) -> dict | None:
        return self.record(model)  # (one record a model: its own format's, or another's a load may convert)

    def others(self, model: str, format_id: str) -> list[dict]:
        record = self.record(model)
        return [record] if record is not None and record["format_id"] != format_id else []

    def record(self, model: str, side: str = "load") -> dict | None:
        """The model's committed record, whatever its format (None where there is none)."""
        key = self.record_key(model)
        size = self._call("a size query", lambda: self.client.get_size(key))
        if size == -704:
            return None
        if size < 0:
            raise ConfigError(f"mooncake: the record {key} could not be read from {self.where()}: "
                              f"{CODES.get(size, f'code {size}')}")
        data = self._call("a get", lambda: self.client.get(key))
        try:
            record = json.loads(bytes(data))
            fmt = record["format_id"]
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"reshard {side} job: {key} in {self.where()} is not a record of stored pages "
                              f"({e})") from None
        if not isinstance(fmt, str):
            raise ConfigError(f"reshard {side} job: {key} in {self.where()} names no format ({fmt!r})")
        return record

    def begin(self, model: str, format_id: str, side: str = "store", **_) -> None:
        self.stored(model, format_id, side)

    def missing(self, format_id: str) -> str:
        return f"in {self.where()} (no record: nothing was stored, or no store job finished)"

    def raw(self):
        """The Mooncake client itself (benchmarks compare its own put and get)."""
        return self.client

    def close(self) -> None:
        client, self.client = getattr(self, "client", None), None
        if client is not None:
            try:
                _bounded(client.close, 5.0, "the client's close")
            except ConfigError:
                pass
