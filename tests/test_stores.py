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
