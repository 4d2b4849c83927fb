"""Pages that hold every layer of a pipeline stage: TensorRT-LLM's block pool and SGLang's
`page_first` host pool (specs/trtllm_pool.lal, specs/sglang_page_first.lal, grid
`stage_heads` of specs/stages.lal), stored under one tp x pp and loaded under another.

Each rank's tensor is filled by an engine model written here from the engines' own layouts,
not from the spec: TRT-LLM's pool `(blocks, layers of the stage, 2, heads, tokens, head_size)`
(its `{blocks, layers, 2, heads * tokens * head_size}` viewed), SGLang's `(2, pages,
page_size, layers of the stage, heads, head_dim)` (its `(2, pages * page_size, ...)` viewed).
Stage s holds layers s * L / pp onward; TP rank r holds heads r * H / tp onward (GQA: head
r // (tp / H)); ranks are stage-major. Every element is a code of (block, layer, kv, head,
token, channel) of the whole model: a load that puts any element elsewhere fails.
"""
import pytest
import torch

from layoutalg.copy.executor import plan
from layoutalg.dsl.library import load
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

N, L, T, D = 3, 4, 4, 8   # blocks, the model's layers, tokens a block, head size
TOTAL = 4                 # the model's KV heads

ENGINES = {"trtllm_pool": "trtllm_kv_block", "sglang_page_first": "sglang_kv_host"}


def _model(total=TOTAL):
    """The whole model's KV as codes, indexed (block, layer, kv, head, token, channel)."""
    b, l, kv, h, t, d = torch.meshgrid(*(torch.arange(n) for n in (N, L, 2, total, T, D)), indexing="ij")
    return (((((b * L + l) * 2 + kv) * total + h) * T + t) * D + d).to(torch.int32)


def _rank_tensor(engine: str, full, tp: int, pp: int, rank: int, total=TOTAL):
    """What the engine's rank `rank` (stage-major) holds: its stage's layers, its heads."""
    stage, r = divmod(rank, tp)
    h = max(1, total // tp)
    first = r * h if total >= tp else r // (tp // total)
    mine = full[:, stage * (L // pp):(stage + 1) * (L // pp), :, first:first + h]  # (N, L/pp, 2, h, T, D)
    if engine == "trtllm_pool":
        return mine.contiguous()
    return mine.permute(2, 0, 4, 1, 3, 5).contiguous()    # SGLang: (2, N, T, L/pp, h, D)


def _derive(deriver, family, tp, pp, total=TOTAL):
    kv = _rank_tensor(family, _model(total), tp, pp, 0, total)
    page = kv.numel() // N * kv.element_size()
    h = max(1, total // tp)
    res = deriver.derive(LayerSpec(ENGINES[family], page, T, h, D, kv.element_size(), sizes={"layers": L}),
                         TensorLayout.of(kv), ParallelConfig(tp, total, pp=pp), N)
    return res


def _reshard(deriver, family, src, dst, total=TOTAL):
    full = _model(total)
    stored, loaded = _derive(deriver, family, *src, total), _derive(deriver, family, *dst, total)
    assert (stored.result, stored.family) == ("certified", family), stored.reasons
    assert (loaded.result, loaded.family) == ("certified", family), loaded.reasons
    assert len(stored.mappings) == src[0] * src[1] and len(loaded.mappings) == dst[0] * dst[1]
    assert stored.mappings[0].layout_id == loaded.mappings[0].layout_id     # one format across tp and pp
    assert stored.mappings[0].parallelism_agnostic and loaded.mappings[0].parallelism_agnostic
    assert stored.mappings[0].format_id == loaded.mappings[0].format_id     # one store folder for both
    pages = torch.zeros(N, stored.mappings[0].canonical_page_size_bytes, dtype=torch.uint8)
    ids = torch.tensor([2, 0, 1])
    for rank, m in enumerate(stored.mappings):
        kv = _rank_tensor(family, full, *src, rank, total)
        plan(m, kv).store(kv, torch.arange(N), pages, ids)
    wrong = 0
    for rank, m in enumerate(loaded.mappings):
        want = _rank_tensor(family, full, *dst, rank, total)
        kv = torch.zeros_like(want)
        plan(m, kv).load(pages, ids, kv, torch.arange(N))
        wrong += int((kv != want).sum())
    return wrong


@pytest.mark.parametrize("family", sorted(ENGINES))
@pytest.mark.parametrize("src, dst", [((2, 2), (4, 1)), ((2, 1), (1, 4)), ((4, 2), (1, 1)), ((1, 4), (2, 2))])
def test_a_stage_page_reshards_across_pp_and_tp_byte_for_byte(deriver, family, src, dst):
    """(tp, pp) -> (tp, pp): stored by one engine layout, loaded under another split."""
    assert _reshard(deriver, family, src, dst) == 0


@pytest.mark.parametrize("family", sorted(ENGINES))
def test_gqa_replicas_under_stages(deriver, family):
    """Two KV heads over tp = 4: each head on two ranks of each stage, one of them writing."""
    assert _reshard(deriver, family, (4, 2), (2, 1), total=2) == 0


def test_a_pipeline_the_page_cannot_split_fails_closed(deriver):
    """pp = 3 does not divide 4 layers: the engine would not split so, and no family takes it."""
    kv = torch.zeros(N, 1, 2, 2, T, D, dtype=torch.int32)
    res = deriver.derive(LayerSpec("trtllm_kv_block", kv.numel() // N * 4, T, 2, D, 4, sizes={"layers": L}),
                         TensorLayout.of(kv), ParallelConfig(2, TOTAL, pp=3), N)
    assert res.result != "certified"


def test_layers_dealt_round_robin_are_proved_yet_load_wrong(tmp_path, deriver):
    """A grid dealing layers to stages round robin (l * pp + stage) tiles and proves like the
    shipped one, but the engines give each stage a contiguous run: against the engine model its
    reshard across pp loses elements. The engine's word (the grid) is what the model checks."""
    from layoutalg.resources import specs_dir
    text = (specs_dir() / "stages.lal").read_text()
    assert "fn layer(l) = stage * (layers / pp) + l" in text
    (tmp_path / "stages.lal").write_text(text.replace("fn layer(l) = stage * (layers / pp) + l",
                                                      "fn layer(l) = l * pp + stage"))
    (tmp_path / "trtllm_pool.lal").write_text((specs_dir() / "trtllm_pool.lal").read_text())
    lib = load([tmp_path / "trtllm_pool.lal"])
    from layoutalg.compile.codegen import compile_family
    from layoutalg.ir.family import resolve
    from layoutalg.verify.check import check_family
    assert check_family(lib, compile_family(resolve(lib, "trtllm_pool"))).ok  # it tiles: check cannot see it
    mutant = Deriver(str(tmp_path))
    assert _reshard(mutant, "trtllm_pool", (2, 2), (2, 1)) > 0
    assert _reshard(deriver, "trtllm_pool", (2, 2), (2, 1)) == 0


def test_reshard_reads_pp_as_a_size_of_a_stage_page():
    """`layoutalg reshard`'s `pp=N`: a size of a stage grid's page (every rank holds the
    tensors), a split of the layers between stages for any other family; refused where it
    is neither."""
    from layoutalg.cli.reshard import _side, _staged
    from layoutalg.errors import LayoutalgError
    assert _staged("trtllm_pool", None) and _staged("sglang_page_first", None) and not _staged("split_nhd", None)
    config, stages = _side("tp=2,pp=2", 3, staged=True)
    assert config["pp"] == 2 and config["tp"] == 2 and list(map(list, stages)) == [[0, 1, 2]]
    config, stages = _side("tp=2,pp=2", 3)
    assert "pp" not in config and list(map(list, stages)) == [[0, 1], [2]]
    with pytest.raises(LayoutalgError, match="pp is its number of stages"):
        _side("tp=2,pp=1+3", 4, staged=True)


def test_pp_changes_nothing_for_a_family_of_one_layer_a_tensor(deriver):
    """An attention layer of split NHD under pp = 2: the same mappings and format id as under
    pp = 1 (pp is no size of its page), and a caller's world of every stage is not its group."""
    kv = torch.zeros(N, 2, T, 1, D, dtype=torch.bfloat16)
    layer = LayerSpec("attention", kv[0].numel() * 2, T, 1, D, 2)
    one = deriver.derive(layer, TensorLayout.of(kv), ParallelConfig(4, 4), N)
    two = deriver.derive(layer, TensorLayout.of(kv), ParallelConfig(4, 4, pp=2), N)
    assert (one.family, two.family) == ("split_nhd", "split_nhd") and one.mappings == two.mappings
    assert one.mappings[0].format_id == two.mappings[0].format_id
    wide = deriver.derive(layer, TensorLayout.of(kv), ParallelConfig(4, 4, pp=2, world_size=8), N)
    assert wide.result != "certified" and any("is one group of tp * pcp = 4 ranks" in r for r in wide.reasons)


def test_runs_and_draw_take_pp_for_a_stage_page_only(capsys):
    from layoutalg.cli.app import main
    from layoutalg.resources import specs_dir
    assert main(["runs", str(specs_dir() / "trtllm_pool.lal"), "--tp", "2", "--pp", "2", "--heads", "4",
                 "--size", "layers=4", "--head-size", "8", "--block-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "4 rank(s)" in out and "rank 3 (stage=1, head_shard=1, writer=0)" in out
    assert main(["runs", str(specs_dir() / "split_nhd.lal"), "--tp", "2", "--pp", "2"]) == 2
    assert "split_nhd holds a layer a tensor" in capsys.readouterr().err
