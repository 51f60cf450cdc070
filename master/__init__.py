"""A replay's orchestration: warmup, then the trace planned, routed and fed to client nodes, and the results written."""
