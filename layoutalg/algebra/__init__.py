"""The layout algebra on flat `shape:stride` layouts, after CuTe: the layout (`layout`), its
operations (`ops`: coalesce, right inverse, compose), the tiling certificate (`tiling`) and the
common refinement of two tilings that direct reshard plans are made of (`refine`).

Imports only the package's records and errors.
"""
