"""Write tests/mutants/*.lal from the shipped specs: one deliberate bug each.

    python tests/mutants/generate.py

Each mutant is a shipped spec with one edit (and its layouts and family renamed, so
mutants can share a library with the shipped specs); its header says what is broken
and which obligation refutes it first. tests/mutants/equivalent/ holds edits that
break nothing the prover checks, each with the argument why.
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SPECS = ROOT / "specs"
OUT = ROOT / "tests" / "mutants"
GRIDS = (SPECS / "grids.lal").read_text()


def family_text(name, src, old, new, grid=None):
    text = (SPECS / f"{src}.lal").read_text()
    text = text.replace('import "grids.lal"', 'import "../../specs/grids.lal"' if grid is None else "")
    assert old in text, (name, old)
    text = text.replace(old, new, 1)
    # rename the layout and family so mutants can share a library with the shipped specs
    for ident in re.findall(r"^layout (\w+)", text, re.M):
        text = re.sub(rf"\b{ident}\(", f"{ident}_{name}(", text)
    text = re.sub(r"^family (\w+)", rf"family \1_{name}", text, flags=re.M)
    if grid is not None:
        text = grid + "\n" + text
    return text


def _rules(text, rname):
    """The statements of `rules rname` in grids.lal, as a grid that `use`s them holds them."""
    start = text.index(f"rules {rname}:")
    body = text[text.index("\n", start) + 1:]
    return body[:body.index("\n\n")] + "\n"


def grid_text(name, gname, old, new):
    text = GRIDS
    start = text.index(f"grid {gname}:")
    end = text.find("\ngrid ", start + 1)
    block = text[start:end if end > 0 else None].replace("    use cp_tokens\n", _rules(text, "cp_tokens"))
    assert old in block, (name, old)
    declared = "".join(line + "\n" for line in text.splitlines() if line.startswith("param "))  # the names it reads
    return declared + block.replace(old, new, 1).replace(f"grid {gname}:", f"grid {gname}_{name}:")


M = []  # (name, why, expected obligation, text)


def fam(name, src, old, new, why, expect):
    M.append((name, why, expect, family_text(name, src, old, new)))


def grid(name, gname, src, old, new, why, expect, fold=None, fnew=None):
    g = grid_text(name, gname, old, new)
    t = family_text(name, src, f"grid {gname}\n", f"grid {gname}_{name}\n", grid=g)
    if fold:
        assert fold in t
        t = t.replace(fold, fnew)
    M.append((name, why, expect, t))


def main():
    fam("m01", "split_nhd", "index kv < 2, t < T, h < H, d < D            # dense, in this order: d fastest\n", "index kv < 2, t < T, h < H, d < D\n    offset d + D * (h + H * (t + (T - 1) * kv))\n",
        "wrong stride: the V half starts one token row early and overlaps K", "local-bijective")
    fam("m02", "split_nhd", "index kv < 2, t < T, h < H, d < D            # dense, in this order: d fastest\n", "index kv < 2, t < T, h < H, d < D\n    offset d + (D + 1) * (h + H * (t + T * kv))\n",
        "a hole: a padding element after every head row", "local-bijective")
    fam("m03", "split_nhd", "head(h)", "head_shard + h",
        "wrong head-shard offset: shards overlap when a rank holds several heads", "writers-disjoint")
    fam("m04", "split_nhd", "head(h)", "(head_shard + 1) * heads + h",
        "head-shard offset off by one shard", "shard-in-range")
    fam("m05", "split_nhd", "(kv, token(t), head(h)", "(kv, token(t) + 1, head(h)",
        "off-by-one token", "shard-in-range")
    fam("m06", "split_nhd", "shard (kv, t, h, d) -> (kv,", "shard (kv, t, h, d) -> (1 - kv,",
        "K and V swapped in the shard map", "single-rank-identity")
    fam("m07", "split_nhd", "canonical split_nhd(total_heads, block_size * cp,", "canonical split_nhd(total_heads, block_size * pcp,",
        "wrong canonical token count: DCP ranks' tokens are not counted", "shard-in-range")
    fam("m08", "split_nhd", "canonical split_nhd(total_heads, block_size * cp,", "canonical split_nhd(total_heads, block_size * cp * 2,",
        "canonical page twice too long: half of it is written by no rank", "writers-cover")
    fam("m09", "split_nhd", "canonical split_nhd(total_heads,", "canonical split_nhd(heads,",
        "canonical page sized for the local heads only", "shard-in-range")
    fam("m10", "split_nhd", "index kv < 2, t < T, h < H, d < D            # dense, in this order: d fastest\n", "index kv < 2, t < T, h < H, d < D\n    offset d + H * (h + H * (t + T * kv))\n",
        "wrong stride: the head stride uses H instead of D", "local-bijective")
    fam("m11", "split_nhd", "(kv, token(t), head(h), d)", "(kv, token(t), head(h), d + 1)",
        "element offset off by one", "shard-in-range")
    fam("m12", "split_hnd", "canonical split_hnd(total_heads", "canonical split_nhd_m12(total_heads",
        "canonical page in NHD order for an HND family: a different byte format", "single-rank-identity")
    # m12 needs the NHD layout too
    M[-1] = (M[-1][0], M[-1][1], M[-1][2], M[-1][3] + "\nlayout split_nhd_m12(H, T, D, e):\n    index kv < 2, t < T, h < H, d < D\n"
             "    offset d + D * (h + H * (t + T * kv))\n    element e bytes\n")
    fam("m13", "split_hnd", "shard (kv, h, t, d) -> (kv, head(h), token(t), d)",
        "shard (kv, h, t, d) -> (kv, token(t), h, d)", "token and head swapped in the shard map", "shard-in-range")
    fam("m14", "packed_nhd", "x fastest\n", "x fastest\n    offset x + D * (h + H * t)\n",
        "packed row stride of one head size instead of two: K/V rows overlap", "local-bijective")
    fam("m15", "packed_hnd", "x fastest\n", "x fastest\n    offset x + 2 * D * (t + (T + 1) * h)\n",
        "a hole: one spare token row after every head", "local-bijective")
    fam("m16", "packed_hnd", "(head(h), token(t), x)", "(head(h), token(t), x + head_size)",
        "V shifted onto the next head's K", "shard-in-range")
    fam("m17", "packed_nhd", "(token(t), head(h), x)", "(t, head(h), x)",
        "context parallelism ignored: every CP rank writes the first tokens", "writers-disjoint")
    fam("m18", "mla", "canonical latent_rows(block_size * cp, page_size / block_size)",
        "canonical latent_rows(block_size * cp, page_size / block_size + 1)",
        "canonical latent row one byte wider than the local row", "writers-cover")
    fam("m19", "opaque", "shard (b) -> (rank * page_size + b)", "shard (b) -> (tp_rank * page_size + b)",
        "PCP ranks ignored: ranks of different PCP groups share a slot", "writers-disjoint")
    fam("m20", "opaque", "canonical bytes(page_size * tp * pcp)", "canonical bytes(page_size * tp)",
        "canonical page too small for PCP", "shard-in-range")
    fam("m21", "opaque", "shard (b) -> (rank * page_size + b)", "shard (b) -> (rank * page_size + b + 1)",
        "slots off by one byte", "shard-in-range")
    grid("m22", "heads", "split_nhd", "    require heads == total_heads / shards\n", "",
         "guard dropped: the local head count is no longer tied to the grid", "shard-in-range")
    grid("m23", "heads", "split_nhd", "    replica writer                       # identical bytes: writers take turns by block id\n", "",
         "replicas not declared: GQA copies all store the same block", "writers-disjoint")
    grid("m24", "heads", "split_nhd", "    replica writer ", "    replica writer, dcp_rank ",
         "wrong writer count: DCP ranks declared replicas, so a block misses their tokens", "writers-cover")
    grid("m25", "heads", "split_nhd", "writer < tp / shards / dcp, dcp_rank < dcp", "writer < tp / shards, dcp_rank < dcp",
         "rank grid larger than the world: DCP counted twice", "writers-cover")
    grid("m26", "heads", "split_nhd", "head_shard < shards,", "head_shard < tp,",
         "GQA: head shards counted per rank, not per KV head", "shard-in-range")
    grid("m28", "heads", "split_nhd", "* interleave + t % interleave\n", "* interleave + t % interleave + cp_rank\n",
         "interleave: the CP rank added twice", "shard-in-range")
    grid("m29", "heads", "split_nhd", "fn token(t) = ((t // interleave) * cp + cp_rank) * interleave + t % interleave",
         "fn token(t) = ((t // interleave) * dcp + cp_rank) * interleave + t % interleave",
         "interleave over DCP ranks only: PCP groups collide", "writers-disjoint")
    grid("m30", "heads", "split_nhd", "fn token(t) = ((t // interleave) * cp + cp_rank) * interleave + t % interleave",
         "fn token(t) = ((t % interleave) * cp + cp_rank) * interleave + t // interleave",
         "chunk and position swapped in the token interleave", "shard-in-range")
    grid("m31", "latent", "mla", "    replica writer\n", "",
         "MLA latent copies not declared replicas: all TP ranks store every block", "writers-disjoint")
    grid("m32", "latent", "mla", "cp_rank = pcp_rank * dcp + dcp_rank", "cp_rank = pcp_rank",
         "MLA interleave ignores DCP ranks", "writers-disjoint")

    for name, why, expect, text in M:
        head = f"# Mutant {name}: {why}.\n# Expected: refuted ({expect}).\n"
        (OUT / f"{name}.lal").write_text(head + text)
    print(len(M), "mutants")

    EQ = [
        ("e01", "heads", "split_nhd", "        require total_heads % tp == 0\n", "",
         "Equivalent: `require heads == total_heads / shards` divides exactly, so where total_heads % tp != 0 "
         "that guard fails too and the layer fails closed; the dropped guard is implied."),
        ("e02", "heads", "split_nhd", "    require tp / shards % dcp == 0       # DCP splits tokens among ranks holding the same heads\n", "",
         "Equivalent: the rank digit `writer < tp / shards / dcp` divides exactly, so the grid is undefined "
         "(fails closed) where the dropped guard would fail."),
        ("e03", "heads", "split_nhd", "ranks pcp_rank < pcp, head_shard < shards, writer < tp / shards / dcp, dcp_rank < dcp",
         "ranks pcp_rank < pcp, head_shard < shards, dcp_rank < dcp, writer < tp / shards / dcp",
         "Equivalent for tiling: DCP rank and writer swap places in the rank id. Every obligation still holds "
         "(it is another valid grid); only conformance with vLLM, where dcp_rank = tp_rank % dcp, tells them apart."),
        ("e04", "heads", "split_nhd", "    case total_heads < tp:               # GQA: each KV head lives on tp / total_heads ranks\n"
         "        require tp % total_heads == 0\n        let shards = total_heads\n",
         "    case total_heads < tp:               # GQA: each KV head lives on tp / total_heads ranks\n"
         "        let shards = tp / total_heads\n",
         "Equivalent for tiling: with shards = tp / total_heads the grid is still exact wherever it is defined "
         "(heads = total_heads / shards must divide), e.g. 4 heads on 8 ranks as 2 shards of 2 heads, 4 replicas each. "
         "It is a different sharding from vLLM's (1 head per rank), which the runtime rejects by the tensor's head count."),
        ("e05", "heads", "split_nhd", "        require block_size % interleave == 0\n", "        require interleave <= block_size\n",
         "Equivalent: the weakened guard admits a chunk of interleave tokens that straddles the block end, but "
         "the compiler splits `t // interleave` exactly and so adds a guard of its own, block_size / interleave "
         "a whole number: the runtime refuses those sizes (it fails closed), and the prover reads that guard too."),
    ]
    for name, gname, src, old, new, why in EQ:
        g = grid_text(name, gname, old, new)
        t = family_text(name, src, f"grid {gname}\n", f"grid {gname}_{name}\n", grid=g)
        t = t.replace('import "../../specs/grids.lal"', "")
        (OUT / "equivalent" / f"{name}.lal").write_text("# " + why.replace(". ", ".\n# ") + "\n" + t)


if __name__ == "__main__":
    main()
