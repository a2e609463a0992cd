"""Raw UDT throughput: libudt from C++ vs the same transfer through dstp's extension.

Run ``python -m bench.udt_raw --help`` from the repository root; see docs/udt.md.
"""
