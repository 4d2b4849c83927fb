"""Lowering against the direct reading of the spec text, on random configurations.

The direct reading (`interpret`) shares no code with the normal form, the algebra or
the lowering, so a bug in any of them shows up here as a byte that lands elsewhere.
"""
from layoutalg.compile.compiled import GuardFailed
from layoutalg.dsl.interpret import Reading, byte_map
from layoutalg.dsl.library import load_default
from layoutalg.runtime.lower import lower
from layoutalg.runtime.derive import compiled_library


def test_random_configurations_agree_byte_for_byte(rng):
    lib, fams = load_default(), compiled_library()
    agreed = 0
    for _ in range(150):
        tp, total = rng.choice((1, 2, 3, 4, 8)), rng.choice((1, 2, 3, 4, 6, 8))
        bs, interleave = rng.choice((1, 2, 4, 6)), rng.choice((1, 2, 3))
        heads = max(1, total // tp)
        sizes = dict(tp=tp, pcp=rng.choice((1, 2, 3)), dcp=rng.choice((1, 2)), interleave=interleave,
                     total_heads=total, heads=heads, block_size=bs, head_size=rng.choice((1, 2, 3)),
                     dtype_bytes=rng.choice((1, 2)), per_token_head_quant=0, compress_ratio=1)
        if rng.random() < 0.5:  # else the grid's default: PCP deals tokens out
            sizes["pcp_replicas"] = rng.choice((0, 1))
        for name, cf in fams.items():
            if cf.serves not in ("attention", "mla", "fallback"):
                continue  # pages of regions: test_regions builds their pages the engine's way
            page = {"attention": 2 * bs * heads * sizes["head_size"] * sizes["dtype_bytes"],
                    "mla": bs * rng.choice((2, 3)), "fallback": rng.choice((1, 5))}[cf.serves]
            full = {**sizes, "page_size": page}
            try:
                maps = lower(cf.evaluate(full))
            except GuardFailed:
                continue
            reading = Reading(lib, name, full)
            assert all(ok for ok, _ in reading.guards)
            for rank, m in enumerate(maps):
                got = {lo + b: co + b for r in m.runs for lo, co, n in r.triples() for b in range(n)}
                assert got == byte_map(reading, rank), (name, full, rank)
            agreed += 1
    assert agreed > 200
