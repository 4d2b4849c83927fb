"""Moving bytes with torch: the copy plans that execute a mapping's runs for any batch of blocks
(`executor`), direct reshard plans and page conversions executed (`direct`), one run's bytes
moved (`move`), block and page ids read (`ids`), and a layer's tensors as page bytes with the
checks on them (`views`).

The public entry points are importable from here: `plan` and `plan_model` (copies between a
rank's pages and canonical pages), `execute`, `gather` and `scatter` (direct reshard plans),
`convert` (pages of another cp), `stages_tile` (a pipeline's stage plans).
"""
from .direct import convert, execute, gather, scatter
from .executor import CopyPlan, ModelPages, ModelPlan, plan, plan_model, stages_tile

__all__ = ["CopyPlan", "ModelPages", "ModelPlan", "convert", "execute", "gather", "plan", "plan_model", "scatter",
           "stages_tile"]
