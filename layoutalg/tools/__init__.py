"""Tools around the library: the multi-process reshard harness (`distributed`, `node`),
pictures (`draw`) and notebooks (`notebook`).
"""
