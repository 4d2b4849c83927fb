import os
import random
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"

# tests/engine runs on vLLM's own objects, in the venv `.ci/engine` makes (LAYOUTALG_ENGINE=1)
collect_ignore = [] if os.environ.get("LAYOUTALG_ENGINE") == "1" else ["engine"]
# tests/stores starts a Mooncake Store on loopback, in the namespace `.ci/stores` makes (LAYOUTALG_STORES=1)
collect_ignore += [] if os.environ.get("LAYOUTALG_STORES") == "1" else ["stores"]
ROOT = Path(__file__).parent.parent
FULL = os.environ.get("LAYOUTALG_FULL") == "1"
"""Long matrices run whole with LAYOUTALG_FULL=1; the suite takes a slice of each (`.ci/proofs`
proves the whole shipped library apart from pytest)."""


@pytest.fixture
def rng():
    return random.Random(20261129)


@pytest.fixture(scope="session")
def corpus_rows():
    from layoutalg.runtime.corpus import read_lines
    return list(read_lines(str(DATA / "vllm_reference.jsonl.gz")))


@pytest.fixture(scope="session")
def deriver():
    """A Deriver of the shipped library (its memo is keyed by the layer: tests may share it)."""
    from layoutalg.runtime.derive import Deriver
    return Deriver()



def _blocks(kv, m) -> int:
    from layoutalg.copy.views import layer_segments
    return layer_segments(kv, m, "kv", "test")[0].bytes.shape[0]


def store_all(kv, pages, m, blocks=None):
    """Through a copy plan: block b of `kv` into page b, for every block (or `blocks`)."""
    import torch
    from layoutalg.copy.executor import plan
    p = plan(m, kv)
    ids = torch.arange(_blocks(kv, m)) if blocks is None else blocks
    return p.store(kv, ids, pages, ids)


def load_all(pages, kv, m):
    """Through a copy plan: page b into block b of `kv`, for every block."""
    import torch
    from layoutalg.copy.executor import plan
    p = plan(m, kv)
    ids = torch.arange(_blocks(kv, m))
    return p.load(pages, ids, kv, ids)
