"""The reference's behaviour, restated from SEMANTICS.md as plain loops: an oracle for
configurations far outside the conformance corpus (which holds block sizes 4 and 16,
head sizes 8 and 64, tp <= 8, pcp <= 2, three blocks).

It reads a corpus-format row (layer spec, tensor shape and strides, parallel config) and
returns the row the reference would write: the result and, per rank, the page sizes,
the writer election and the byte map as merged (local, canonical, size) triples. It
shares nothing with layoutalg: no spec, no algebra, no runtime; fragments are listed one
(token, head) row at a time and merged, so it is slow but obviously right.

`random_row(rng)` draws a configuration, most of them served, some broken on purpose
(wrong strides, heads, page size, quantisation, world size) so that fail-closed is
exercised too.
"""
from __future__ import annotations

import random

LAYOUTS = ("split_nhd", "split_hnd", "packed_nhd", "packed_hnd", "mla")


def _merge(fragments) -> list[list[int]]:
    out: list[list[int]] = []
    for lo, co, n in sorted(fragments):
        if out and out[-1][0] + out[-1][2] == lo and out[-1][1] + out[-1][2] == co:
            out[-1][2] += n
        else:
            out.append([lo, co, n])
    return out


def _rank(par: dict, rank: int) -> dict:
    tp, dcp, pcp = par["tp"], par.get("dcp", 1), par.get("pcp", 1)
    tp_rank, pcp_rank = rank % tp, rank // tp
    cp = dcp * pcp
    cp_rank = pcp_rank * dcp + tp_rank % dcp
    interleave = par.get("interleave", 1)

    def token(l):
        return ((l // interleave) * cp + cp_rank) * interleave + l % interleave
    return dict(tp_rank=tp_rank, cp=cp, token=token)


def _mla(spec, par, ctx) -> dict | None:
    page, bs = spec["page_size_bytes"], spec["block_size"]
    if spec.get("compress_ratio", 1) != 1 or page % bs or par["tp"] % par.get("dcp", 1) \
            or spec.get("per_token_head_quant"):
        return None
    row = page // bs
    dcp = par.get("dcp", 1)
    return dict(canonical_page_size_bytes=ctx["cp"] * page, local_page_size_bytes=page,
                num_writers=par["tp"] // dcp, writer_index=ctx["tp_rank"] // dcp,
                parallelism_agnostic=ctx["cp"] == 1,
                triples=_merge((t * row, ctx["token"](t) * row, row) for t in range(bs)))


def _heads(spec, par):
    """(shards, replication) or None where the reference's head gates fail."""
    total, tp = par["total_kv_heads"], par["tp"]
    if spec["num_kv_heads"] != max(1, total // tp):
        return None
    if total >= tp:
        shards, replication = (tp, 1) if total % tp == 0 else (None, None)
    else:
        shards, replication = (total, tp // total) if tp % total == 0 else (None, None)
    if shards is None or replication % par.get("dcp", 1):
        return None
    return shards, replication


def _form(spec, tensor, num_blocks) -> str | None:
    """Which of the four attention layouts the tensor's shape and strides say, or None."""
    bs, H, D, P = spec["block_size"], spec["num_kv_heads"], spec["head_size"], spec["page_size_bytes"]
    shape, stride, e = tuple(tensor["shape"]), tuple(tensor["stride"]), tensor["dtype_bytes"]
    if shape == (num_blocks, H, bs, 2 * D):
        if H * bs * 2 * D * e != P or stride[3] != 1:
            return None
        if (stride[1], stride[2]) == (2 * D, H * 2 * D):
            return "packed_nhd"
        if (stride[1], stride[2]) == (bs * 2 * D, 2 * D):
            return "packed_hnd"
        return None
    if shape == (num_blocks, 2, bs, H, D):
        if 2 * bs * H * D * e != P or stride[4] != 1 or stride[1] != bs * H * D:
            return None
        if (stride[2], stride[3]) == (H * D, D):
            return "split_nhd"
        if (stride[3], stride[2]) == (bs * D, D):
            return "split_hnd"
    return None


def _attention(spec, tensor, par, ctx, num_blocks) -> dict | None:
    if spec.get("per_token_head_quant") or tensor is None:
        return None
    heads = _heads(spec, par)
    form = heads and _form(spec, tensor, num_blocks)
    if not form:
        return None
    shards, replication = heads
    bs, H, D, P = spec["block_size"], spec["num_kv_heads"], spec["head_size"], spec["page_size_bytes"]
    e, T, HT = tensor["dtype_bytes"], bs * ctx["cp"], shards * H
    first = (ctx["tp_rank"] // replication) * H  # the global head of local head 0
    frags = []
    for t in range(bs):
        c = ctx["token"](t)
        for h in range(H):
            g = first + h
            if form == "packed_nhd":
                frags.append(((t * H + h) * 2 * D * e, (c * HT + g) * 2 * D * e, 2 * D * e))
            elif form == "packed_hnd":
                frags.append(((h * bs + t) * 2 * D * e, (g * T + c) * 2 * D * e, 2 * D * e))
            for kv in range(2 if form.startswith("split") else 0):
                if form == "split_nhd":
                    frags.append(((((kv * bs + t) * H + h) * D) * e, (((kv * T + c) * HT + g) * D) * e, D * e))
                else:
                    frags.append(((((kv * H + h) * bs + t) * D) * e, (((kv * HT + g) * T + c) * D) * e, D * e))
    dcp = par.get("dcp", 1)
    return dict(canonical_page_size_bytes=ctx["cp"] * shards * P, local_page_size_bytes=P,
                num_writers=replication // dcp, writer_index=(ctx["tp_rank"] % replication) // dcp,
                parallelism_agnostic=ctx["cp"] == 1, triples=_merge(frags))


def _layer(spec, tensor, par, rank, num_blocks) -> dict | None:
    kind = spec.get("kind")
    if kind not in ("attention", "mla"):
        return None
    ctx = _rank(par, rank)
    I, bs = par.get("interleave", 1), spec["block_size"]
    if ctx["cp"] > 1 and (I > bs or bs % I):
        return None
    return _mla(spec, par, ctx) if kind == "mla" else _attention(spec, tensor, par, ctx, num_blocks)


def expected(row: dict) -> dict:
    """The reference's answer for one corpus-format row: {"result", "ranks"?}."""
    spec, tensor, par = row["spec"], row.get("tensor"), row["parallel"]
    world = par["tp"] * par.get("pcp", 1)
    if par.get("world_size", world) != world:
        return {"result": "no_mappings"}
    ranks = [_layer(spec, tensor, par, r, row["num_blocks"]) for r in range(world)]
    if all(ranks):
        return {"result": "certified", "ranks": ranks}
    P = spec.get("page_size_bytes")
    if P is None:
        return {"result": "no_mappings"}
    return {"result": "opaque", "ranks": [
        dict(canonical_page_size_bytes=world * P, local_page_size_bytes=P, num_writers=1, writer_index=0,
             parallelism_agnostic=False, triples=[[0, r * P, P]]) for r in range(world)]}


def _tensor(layout, n, bs, H, D, e) -> dict | None:
    if layout == "mla":
        return None
    if layout.startswith("packed"):
        head, token = (2 * D, H * 2 * D) if layout == "packed_nhd" else (bs * 2 * D, 2 * D)
        return dict(shape=[n, H, bs, 2 * D], stride=[H * bs * 2 * D, head, token, 1], dtype_bytes=e)
    token, head = (H * D, D) if layout == "split_nhd" else (D, bs * D)
    return dict(shape=[n, 2, bs, H, D], stride=[2 * bs * H * D, bs * H * D, token, head, 1], dtype_bytes=e)


def random_row(rng: random.Random) -> dict:
    """One configuration: served by the reference about two times in three."""
    layout = rng.choice(LAYOUTS)
    tp, pcp, dcp = rng.choice((1, 2, 3, 4, 6, 8, 16)), rng.choice((1, 1, 2, 3, 4)), rng.choice((1, 1, 2, 4, 8))
    total = rng.choice((1, 2, 3, 4, 6, 8, 12, 16, 32))
    if rng.random() < 0.7:  # mostly a grid the heads fit
        total = rng.choice([t for t in (1, 2, 4, 8, 16, 32, tp, 2 * tp, tp // 2 or 1) if t % tp == 0 or tp % t == 0])
        dcp = rng.choice([d for d in (1, 2, 4, 8) if (tp // total if total < tp else 1) % d == 0 or layout == "mla"])
    bs = rng.choice((1, 2, 3, 4, 8, 16, 32, 64))
    interleave = rng.choice((1, 1, 2, 4, 8, bs))
    D, e, n = rng.choice((1, 3, 8, 16, 64, 128)), rng.choice((1, 2, 4)), rng.choice((1, 2, 5))
    H = max(1, total // tp)
    page = (2 * bs * H * D * e) if layout != "mla" else bs * rng.choice((1, 7, 64, 1152))
    spec = dict(kind="mla" if layout == "mla" else "attention", block_size=bs, num_kv_heads=H, head_size=D,
                dtype_bytes=e, per_token_head_quant=False, page_size_bytes=page)
    if layout == "mla":
        spec["compress_ratio"] = 1
    tensor = _tensor(layout, n, bs, H, D, e)
    par = dict(tp=tp, dcp=dcp, pcp=pcp, interleave=interleave, total_kv_heads=total, world_size=tp * pcp)
    broken = rng.random()
    if broken < 0.05 and tensor:
        tensor["stride"][2], tensor["stride"][3] = tensor["stride"][3], tensor["stride"][2]
    elif broken < 0.08:
        spec["num_kv_heads"] = H + 1
    elif broken < 0.11:
        spec["page_size_bytes"] = page + e
    elif broken < 0.13:
        spec["per_token_head_quant"] = True
    elif broken < 0.15 and layout == "mla":
        spec["compress_ratio"] = 2
    elif broken < 0.17:
        par["world_size"] = tp * pcp * 2
    elif broken < 0.19:
        spec = dict(kind="opaque", page_size_bytes=page)
        tensor = None
    return dict(layout=layout, num_blocks=n, spec=spec, tensor=tensor, parallel=par)
