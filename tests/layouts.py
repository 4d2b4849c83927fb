"""Random small layouts for the algebra's post-condition tests (seeded by the caller)."""
import random

from layoutalg.algebra.layout import Layout


def random_layout(rng: random.Random, max_modes: int = 4) -> Layout:
    shape = tuple(rng.choice((1, 2, 3, 4)) for _ in range(rng.randint(1, max_modes)))
    stride = tuple(rng.choice((0, 1, 2, 3, 4, 6, 8, 12)) for _ in shape)
    return Layout(shape, stride)


def random_compact(rng: random.Random, max_modes: int = 4) -> Layout:
    """A random permutation of a random mixed-radix layout: a bijection onto [0, size)."""
    shape = [rng.choice((1, 2, 3, 4)) for _ in range(rng.randint(1, max_modes))]
    stride, run = [], 1
    for n in shape:
        stride.append(run)
        run *= n
    order = list(range(len(shape)))
    rng.shuffle(order)
    return Layout(tuple(shape[k] for k in order), tuple(stride[k] for k in order))
