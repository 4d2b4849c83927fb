import random
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent


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
