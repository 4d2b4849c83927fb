"""Moving bytes with torch: views of a layer's tensors and the checks on them (`views`), and
the copy plans that execute a mapping's runs for any batch of blocks (`executor`).

The public entry points, `plan` and `plan_model`, are importable from here.
"""
from .executor import CopyPlan, ModelPlan, plan, plan_model

__all__ = ["CopyPlan", "ModelPlan", "plan", "plan_model"]
