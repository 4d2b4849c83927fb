"""Direct reshard plans against the spec, with Z3: one prover of the registered rows
(`store.RESHARD_OBLIGATIONS`: `reshard-cover`, `reshard-match`, `reshard-domain`), in two
strategies that share one solver (`at_sizes.solve_query`):

- `at_sizes`: the plans the runtime built at given sizes (`plans.reshard.direct_plans`,
  `cross_plans`), each run a number, checked against the spec's reading of both sides;
- `all_sizes`: a plan built once for every size in the algebra (`symplan`), its runs
  formulas, checked for every size (`plan_queries`); what `layoutalg prove --reshard` asks,
  each family in a fresh process.
"""
from .all_sizes import prove_all_sizes
from .at_sizes import prove_cross_plans, prove_plans, sequence_unshown

__all__ = ["prove_all_sizes", "prove_cross_plans", "prove_plans", "sequence_unshown"]
