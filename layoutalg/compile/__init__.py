"""IR -> plain Python a fresh process runs without sympy, lark or Z3: the code generator
(`codegen`), the compiled families and pages the runtime executes (`compiled`, `instance`),
the whitelist that admits generated source (`whitelist`) and the on-disk cache (`cache`).
"""
