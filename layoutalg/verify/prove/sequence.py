"""The `sequence-order` query: a family's `sequence t` claim as a bijection between a page's
tokens and the places in the sequence it covers, on an obligations `Model` (its digits, indices
and reading of the spec). Pages of another cp or block size are joined along `t`."""
from __future__ import annotations

import z3

from .witness import Sequence


def sequence_query(m):
    """A `sequence seq` claim, as a bijection between a page's tokens and the sequence positions
    it covers (pages of another cp or block size are joined along `seq`, so nothing less will
    do). Violated where any of its parts fails:

    - place: a rank puts local token t at canonical seq != token(t);
    - count: the local index `seq` does not run over exactly the block's `block_size` tokens;
    - one-to-one: a rank's token(t) sends two of its tokens to one place in the sequence;
    - pages: the canonical index `seq` does not run over exactly `block_size * cp` places (cp,
      the grid's count of token shards; 1 where the grid names none), the tokens a canonical
      page holds. With the tiling rows (every canonical place written) this leaves no place
      for two tokens, by counting.
    """
    if m.r.fdef.shard is None:  # a page of regions: each data region has a claim of its own
        raise LookupError(f"'{m.family}' is a page of regions: its `sequence` claim is asked of each data region "
                          f"(its parts, `family.region`)")
    d, cd = m.digits("")
    i, ci = m.index("local", "")
    j, cj = m.index("local", "'")
    c = m.r.shard(i, d)
    seq = m.r.fdef.sequence.id
    want = m.r.sequence_place(i, d)
    other = m.r.sequence_place(j, d)
    tokens, free, cp = _block_tokens(m)
    local, canon = m.r.extents("local")[seq], m.r.extents("canonical")[seq]
    parts = [z3.And(*ci, *cd, _ne(c[seq], want)),
             z3.And(*free, _ne(local, tokens)),
             z3.And(*ci, *cj, *cd, _ne(i[seq], j[seq]), _eq(want, other)),
             z3.And(*free, _ne(canon, tokens * cp))]
    meaning = ["place", "count", "one-to-one", "pages"]
    return z3.Or(*parts), Sequence(i=i, j=j, d=d, c=c, seq=seq, want=want, other=other, local=local,
                                   canonical=canon, tokens=tokens, cp=cp, parts=tuple(parts), meaning=tuple(meaning))


def _block_tokens(m):
    """(block_size, its bounds where free, cp) as the model reads them: the engine's tokens a
    rank's block holds, and the grid's `cp` (its count of token shards; 1 where it names none).
    A family that never reads block_size gets it free over its declared domain: its claim
    cannot then be tied to the engine's tokens, and is refuted."""
    tokens, free = m.sizes.get("block_size"), []
    if tokens is None:
        p = m.lib.vocabulary()["block_size"]
        tokens = m.fresh("block_size")
        free = [tokens >= p.lo, tokens <= p.hi]
    return tokens, free, m.r.token_shards()


def _bool(x):
    return z3.BoolVal(x) if isinstance(x, bool) else x


def _ne(a, b):
    return _bool(a != b)


def _eq(a, b):
    return _bool(a == b)
