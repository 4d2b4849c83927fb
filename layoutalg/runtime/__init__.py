"""The engine's path: lowering a configuration's digit table to copy runs (`lower`), deriving
every rank's canonical page mapping of a layer (`derive`: `Deriver`), the vLLM adapter
(`vllm`) and the conformance corpus format (`corpus`). Never imports the parser or Z3.
"""
