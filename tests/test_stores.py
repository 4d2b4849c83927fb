"""The file page store on its own (`tools.stores.FileStore`): what a loader may take as stored."""
import json
import os

import pytest
import torch

from layoutalg.errors import ConfigError
from layoutalg.tools.stores import FileStore, PageKey


def _stored(root, model="model-a", fmt="fmt1", fill=7):
    store = FileStore(str(root))
    store.begin(model, fmt, layers=1, pages=2, page_bytes=4)
    store.put(PageKey(model, fmt, "job", 0), [0, 1], torch.full((2, 4), fill, dtype=torch.uint8))
    store.commit(model, {"format_id": fmt, "model": model, "pages": 2, "layers": 1, "page_bytes": 4})
    return store


def test_a_folder_of_one_model_is_never_read_or_written_as_another(tmp_path):
    store = _stored(tmp_path)
    assert store.stored("model-a", "fmt1")["model"] == "model-a"
    with pytest.raises(ConfigError, match="holds pages of model 'model-a', not 'model-b'"):
        store.stored("model-b", "fmt1")
    with pytest.raises(ConfigError, match="holds pages of model 'model-a', not 'model-b'"):
        store.begin("model-b", "fmt1", layers=1, pages=2, page_bytes=4)
    out = torch.zeros(2, 4, dtype=torch.uint8)
    store.get(PageKey("model-a", "fmt1", "job", 0), [0, 1], out)
    assert out.eq(7).all()  # the refused store wrote nothing over them


def test_a_store_that_dies_after_it_began_leaves_no_record_over_rewritten_pages(tmp_path):
    store = _stored(tmp_path)
    store.begin("model-a", "fmt1", layers=1, pages=2, page_bytes=4)  # a second store job, killed right after
    assert store.stored("model-a", "fmt1") is None                   # nothing a loader takes as whole
    _stored(tmp_path, fill=9)
    assert store.stored("model-a", "fmt1")["pages"] == 2
    assert not os.path.exists(tmp_path / "fmt1" / "job.json.tmp")
    with open(tmp_path / "fmt1" / "job.json") as f:
        assert json.load(f)["model"] == "model-a"


def test_a_negative_page_id_is_refused_by_name(tmp_path):
    store = _stored(tmp_path)
    out = torch.zeros(1, 4, dtype=torch.uint8)
    with pytest.raises(ConfigError, match="page id -1 is negative"):
        store.get(PageKey("model-a", "fmt1", "job", 0), [-1], out)


class _Group:
    """Stands in for torch.distributed's process group (what `_one_record` calls of it): the first
    rank's record is `first`; a single process, so the all-reduce leaves this rank's vote."""
    ReduceOp = type("ReduceOp", (), {"MIN": "min"})

    def __init__(self, first):
        self.first, self.destroyed = first, False

    def broadcast_object_list(self, objects, src):
        objects[0] = self.first

    def all_reduce(self, tensor, op):
        pass

    def destroy_process_group(self):
        self.destroyed = True


def test_ranks_that_read_two_records_fail_together(tmp_path):
    """A store job committing between two load ranks' reads of the record: no rank loads."""
    from layoutalg.tools.node import _one_record
    store = _stored(tmp_path)
    record = store.stored("model-a", "fmt1")
    _one_record(_Group(dict(record)), record, store)             # one record: the job goes on
    group = _Group({**record, "job": "a later job"})
    with pytest.raises(ConfigError, match="changed while the job's ranks read it .* nothing was loaded"):
        _one_record(group, record, store)
    assert group.destroyed
