"""Pipeline stages own layers: a model's pages stored by the stages of one pipeline and loaded
by those of another, each stage a process group of its own, every byte checked."""
import subprocess
import sys

import pytest

from layoutalg.tools.distributed import group_of, parse_config, reshard
from layoutalg.errors import ConfigError
from layoutalg.params import stage_layers

from conftest import FULL, ROOT


@pytest.mark.parametrize("layers, pp, counts", [(61, 2, [31, 30]), (61, 4, [15, 15, 16, 15]), (8, 2, [4, 4]),
                                                (7, 3, [2, 3, 2]), (5, 5, [1] * 5)])
def test_the_layers_split_as_vllm_splits_them(layers, pp, counts):
    """vLLM's rule: an even share each, the remainder one each to the stages before the last."""
    owned = stage_layers(layers, pp)
    assert [len(r) for r in owned] == counts
    assert [i for r in owned for i in r] == list(range(layers))  # contiguous, in order, each once


def test_an_explicit_split_must_own_every_layer_once():
    assert stage_layers(8, split=(3, 5)) == (range(0, 3), range(3, 8))
    with pytest.raises(ConfigError, match="8 layers in all, got 7"):
        stage_layers(8, split=(3, 4))
    with pytest.raises(ConfigError, match="stage 1 owns no layer"):
        stage_layers(4, split=(2, 0, 2))
    with pytest.raises(ConfigError, match="1 to 4 stages"):
        stage_layers(4, 5)


def test_a_reshard_past_the_processes_one_machine_runs_is_refused():
    g = group_of("split_hnd", parse_config("tp=2"), 4, 4, 16, "bf16", 2)
    with pytest.raises(ConfigError, match="130 processes"):
        reshard(g, g, 65, stages=(stage_layers(65, 64), ()), log=lambda *_: None)


def test_stages_that_do_not_own_each_layer_once_are_refused():
    g = group_of("split_hnd", parse_config("tp=2"), 4, 4, 16, "bf16", 2)
    with pytest.raises(ConfigError, match="store side's pipeline stages own layers"):
        reshard(g, g, 4, stages=((range(0, 2), range(1, 4)), ()), log=lambda *_: None)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "layoutalg", "reshard", "--family", "split_hnd", "--heads", "4",
                           "--head-size", "16", "--block-size", "4", "--blocks", "2", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_a_direct_reshard_between_pipelines_of_other_stages():
    """Each layer's bytes go from the store stage that owns it to the load stage that owns it, here
    into blocks of half the tokens (the plans compose the conversion between block sizes)."""
    proc = _cli("--store", "tp=2", "--load", "pp=1+2,tp=1,block_size=2", "--layers", "3", "--direct")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reshard-match  proved" in proc.stdout and "another cp or block size" in proc.stdout, proc.stdout
    assert "direct: 2 stages (layers 0, 1-2) of 1 ranks" in proc.stdout, proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "3 passed, 0 failed"


def test_vllms_split_is_proved_a_partition_of_the_layers_and_a_broken_split_is_refuted(monkeypatch):
    """The `stages-tile` row: the proof's formula is `stage_layers`'s (by enumeration), proved a
    partition for all sizes; one extra layer too many (to r + 1 stages) is refuted. The enumeration
    runs to 16 layers (every stage count of each, remainders 0 to pp - 1); to 39 with LAYOUTALG_FULL=1."""
    import z3
    from layoutalg.verify.prove import pipeline
    for layers in range(1, 40 if FULL else 17):
        for pp in range(1, layers + 1):
            q, r = divmod(layers, pp)
            starts = [z3.simplify(pipeline._start(z3.IntVal(s), q, r, pp)).as_long() for s in range(pp + 1)]
            assert [range(a, b) for a, b in zip(starts, starts[1:])] == list(stage_layers(layers, pp)), (layers, pp)
    row = pipeline.stages_row(10_000_000)
    assert (row.status, row.obligation) == ("proved", "stages-tile"), row.detail
    broken = lambda s, q, r, pp: z3.If(s == pp, pp * q + r,  # noqa: E731
                                       s * q + z3.If(s - (pp - 2 - r) > 0, s - (pp - 2 - r), 0))
    monkeypatch.setattr(pipeline, "_start", broken)
    row = pipeline.stages_row(10_000_000)
    assert row.status == "refuted" and "owns no layer" in row.detail, (row.status, row.detail)
