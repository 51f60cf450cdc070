"""drtp — the Docker Registry Trace Player.

The core package holds what every stage shares: trace records, the trace
reader, the config, the trace generator, the local registry fixture and the
command line. Dispatch (``drtp.master``), execution (``drtp.client``),
simulation (``drtp.plugins``) and analysis (``drtp.analysis``) live in their
own top-level folders and are installed under this namespace.
"""

__version__ = "0.1.0"
