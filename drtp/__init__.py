"""drtp — the Docker Registry Trace Player.

The core package holds what every stage shares: trace records, the trace
reader, the config, the trace generator, the local registry fixture and the
command line. Dispatch (``drtp.master``), execution (``drtp.client``),
simulation (``drtp.plugins``) and analysis (``drtp.analysis``) live in their
own top-level folders and are installed under this namespace.
"""

__version__ = "0.1.0"

# Loaded on first use, so ``import drtp`` stays cheap (pandas is imported only when a run is loaded).
LAZY = {"load_run": "drtp.analysis.run_data", "load_runs": "drtp.analysis.run_data"}


def __getattr__(name: str):
    """``drtp.load_run`` and ``drtp.load_runs``: replay runs as pandas frames (drtp.analysis.run_data)."""
    if name in LAZY:
        import importlib

        return getattr(importlib.import_module(LAZY[name]), name)
    raise AttributeError(f"module 'drtp' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *LAZY])
