"""Where a store job's canonical pages go and a load job's come from: a page store.

A page store keeps whole canonical pages, each named by a `PageKey`: the model, the pages'
format id (`CanonicalPageMapping.format_id`), the store job that wrote it, the layer (or a
region's name) and the page (an index, or a block hash). A store job puts whole pages and then
commits one record; a load job reads the record first, so that

- a page of another format is refused before any byte is copied (the record names the
  format the pages were stored in), unless the two formats convert (pages of another cp or
  block size of one family: `node.load_job` converts them on the way in);
- only a committed job's pages are read: a store job killed mid-way leaves no record that
  names its pages, so no loader takes a half-written page as whole;
- a page that is not there is an error naming its key.

Two backends:

- `FileStore` (the default, nothing to start): `DIR/FORMAT/layer{L}.pages`, the pages of a
  layer in one file, page p at byte `p * page bytes`, and the record `DIR/FORMAT/job.json`
  written last, whole (renamed into place). A folder holds one model; a store job removes the
  record before it rewrites the pages in place, so a job killed mid-way leaves no record (the
  previous job's pages are gone with it: rerun the store), never one naming rewritten pages.
- `tools.mooncake.MooncakeStore`: a Mooncake Store master and its clients' memory (see
  docs/moving-bytes.md#page-stores); every job's pages are new keys, and the record moves
  to them only when they are all in.

`node.open_store("file", pages=DIR)` or `node.open_store("mooncake", master="HOST:PORT")` gives
one. Nothing here imports a backend's library: `tools.mooncake` imports it inside its functions.
"""
from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass

import torch

from ..errors import ConfigError

@dataclass(frozen=True)
class PageKey:
    """The pages of one layer of one store job: `page` ids are given to `put` and `get`."""

    model: str
    format_id: str
    job: str
    layer: int | str

    def page(self, page) -> str:
        """A page's key as text: `layoutalg/MODEL/FORMAT/JOB/LAYER/PAGE`."""
        return f"layoutalg/{self.model}/{self.format_id}/{self.job}/{self.layer}/{page}"


class PageStore:
    """What a page store does; `FileStore` and `tools.mooncake.MooncakeStore` implement it.

    `begin` (one process of a store job, before any page is put) checks that the store may
    hold this model's pages in this format; `put` writes whole pages (`pages[i]` is page
    `page_ids[i]`); `commit` makes a job's pages visible, with `record` (what was stored:
    format_id, layers, pages, page_bytes, ...); `stored` gives a committed record, refusing
    one of another format; `get` fills `out[i]` with page `page_ids[i]`, or raises naming a
    page that is not there."""

    name = "store"

    def where(self) -> str:
        raise NotImplementedError

    def place(self, format_id: str) -> str:
        """Where a format's pages are, in words."""
        return self.where()

    def missing(self, format_id: str) -> str:
        """Where a loader looked, in words, for pages it did not find."""
        return f"in {self.where()}"

    def new_job(self) -> str:
        """A name for a store job's pages, new each time: no job overwrites another's keys."""
        return secrets.token_hex(6)

    def begin(self, model: str, format_id: str, side: str = "store") -> None:
        self.stored(model, format_id, side)

    def put(self, key: PageKey, page_ids, pages: torch.Tensor) -> None:
        raise NotImplementedError

    def commit(self, model: str, record: dict) -> None:
        raise NotImplementedError

    def stored(self, model: str, format_id: str, side: str = "load") -> dict | None:
        raise NotImplementedError

    def get(self, key: PageKey, page_ids, out: torch.Tensor) -> None:
        raise NotImplementedError

    def others(self, model: str, format_id: str) -> list[dict]:
        """The committed records of `model` in formats other than `format_id`, newest first:
        what a load job of `format_id` may convert from (pages of another cp or block size)."""
        return []

    def find(self, model: str, format_id: str) -> dict | None:
        """The record a load job of `format_id` reads: its own format's where there is one (as
        `stored` checks it), else the newest of another format (`others`), else None."""
        own = self.stored(model, format_id, "load")
        if own is not None:
            return own
        others = self.others(model, format_id)
        return others[0] if others else None

    def close(self) -> None:
        pass


def check_pages(key: PageKey, page_ids, pages: torch.Tensor, page_bytes: int | None = None) -> list:
    """The page ids as a list, after checking `pages` is a (len(ids), page bytes) contiguous uint8 tensor on the CPU."""
    ids = [int(p) for p in (page_ids.tolist() if isinstance(page_ids, torch.Tensor) else page_ids)]
    if pages.dtype != torch.uint8 or pages.dim() != 2 or pages.shape[0] != len(ids) or not pages.is_contiguous() \
            or pages.device.type != "cpu":
        raise ConfigError(f"page store: layer {key.layer}: pages must be a contiguous uint8 CPU tensor of "
                          f"({len(ids)}, page bytes), got {tuple(pages.shape)} {pages.dtype} on {pages.device}")
    if page_bytes is not None and pages.shape[1] != page_bytes:
        raise ConfigError(f"page store: layer {key.layer}: pages of {pages.shape[1]} bytes, the record says {page_bytes}")
    if len(set(ids)) != len(ids):
        raise ConfigError(f"page store: layer {key.layer}: a page id is given twice")
    if any(p < 0 for p in ids):
        raise ConfigError(f"page store: layer {key.layer}: page id {min(ids)} is negative")
    return ids


class FileStore(PageStore):
    """Canonical pages in files under `root`, a path every node shares (`layoutalg reshard --pages DIR`)."""

    name = "file"

    def __init__(self, root: str):
        self.root = str(root)

    def where(self) -> str:
        return self.root

    def place(self, format_id: str) -> str:
        return self.folder(format_id)

    def folder(self, format_id: str) -> str:
        return os.path.join(self.root, format_id)

    def file(self, format_id: str, layer) -> str:
        return os.path.join(self.folder(format_id), f"layer{layer}.pages")

    def begin(self, model: str, format_id: str, side: str = "store", layers: int = 0, pages: int = 0,
              page_bytes: int = 0) -> None:
        """The folder made, after checking it holds no other format's pages; each layer's file its whole size."""
        os.makedirs(self.folder(format_id), exist_ok=True)
        self.stored(model, format_id, side)  # (a folder is one format's and one model's: never overwrite others')
        meta = os.path.join(self.folder(format_id), "job.json")
        if os.path.exists(meta):  # the pages are about to be rewritten: no record may name them until commit
            os.remove(meta)
        for layer in range(layers):
            with open(self.file(format_id, layer), "wb") as f:
                f.truncate(pages * page_bytes)

    def put(self, key: PageKey, page_ids, pages: torch.Tensor) -> None:
        ids = check_pages(key, page_ids, pages)
        n = pages.shape[1]
        flat = pages.numpy()
        fd = os.open(self.file(key.format_id, key.layer), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for i, p in enumerate(ids):  # whole pages, by byte-range writes (no mapping of a shared file)
                os.pwrite(fd, flat[i].tobytes(), p * n)
            os.fsync(fd)
        finally:
            os.close(fd)

    def commit(self, model: str, record: dict) -> None:
        """The record written whole or not at all (a temporary file renamed over it)."""
        meta = os.path.join(self.folder(record["format_id"]), "job.json")
        with open(meta + ".tmp", "w") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(meta + ".tmp", meta)

    def stored(self, model: str, format_id: str, side: str = "load") -> dict | None:
        """What `FORMAT/job.json` says was stored (None where nothing was), after checking it
        names this format: a store never overwrites pages of another format, and a load never reads them."""
        folder = self.folder(format_id)
        meta = os.path.join(folder, "job.json")
        if not os.path.exists(meta):
            return None
        try:
            with open(meta) as f:
                record = json.load(f)
            fmt = record["format_id"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"reshard {side} job: {meta} is not a record of stored pages ({e})") from None
        if fmt != format_id:
            raise ConfigError(f"reshard {side} job: {folder} holds pages of format {fmt}, not {format_id}")
        if record.get("model") != model:  # the folder's pages are another model's, even in this format
            raise ConfigError(f"reshard {side} job: {folder} holds pages of model {record.get('model')!r}, "
                              f"not {model!r}")
        return record

    def others(self, model: str, format_id: str) -> list[dict]:
        """The records in the root's other folders that name their own folder's format and `model`."""
        found = []
        for name in sorted(os.listdir(self.root)) if os.path.isdir(self.root) else []:
            meta = os.path.join(self.root, name, "job.json")
            if name == format_id or not os.path.isfile(meta):
                continue
            try:
                with open(meta) as f:
                    record = json.load(f)
                when = os.stat(meta).st_mtime
            except (OSError, ValueError):
                continue  # (not a record: `missing` still lists the folder)
            if isinstance(record, dict) and record.get("format_id") == name and record.get("model") == model:
                found.append((when, record))
        return [r for _, r in sorted(found, key=lambda x: -x[0])]

    def missing(self, format_id: str) -> str:
        there = sorted(os.listdir(self.root)) if os.path.isdir(self.root) else []
        return f"in {self.root}" + (f"; it holds {', '.join(there)}" if there else "; it holds none")

    def get(self, key: PageKey, page_ids, out: torch.Tensor) -> None:
        ids = check_pages(key, page_ids, out)
        n = out.shape[1]
        path = self.file(key.format_id, key.layer)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            raise ConfigError(f"page store: layer {key.layer}'s pages are not in {self.root} ({path}: "
                              f"{e.strerror})") from None
        try:
            flat = out.numpy()
            for i, p in enumerate(ids):
                data = os.pread(fd, n, p * n)
                if len(data) != n:
                    raise ConfigError(f"page store: page {p} of layer {key.layer} is not in {path} "
                                      f"(the file ends at {os.fstat(fd).st_size} bytes)")
                flat[i] = memoryview(data)
        finally:
            os.close(fd)
