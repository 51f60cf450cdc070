"""drtp — the Docker Registry Trace Player.

The top-level folders master/, client/, plugins/ and analysis/ are installed
as subpackages of ``drtp`` (``drtp.master``…) beside the core package drtp/.
"""

from setuptools import setup

PARTS = ("master", "client", "plugins", "analysis")

setup(
    name="drtp",
    version="0.1.0",
    description="Docker Registry Trace Player: replay, simulate and analyse container registry traces",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=["drtp", "drtp.config", "drtp.trace", "drtp.registry", "drtp.replay", "drtp.cluster", "drtp.slurm"]
    + [f"drtp.{p}" for p in PARTS]
    + [f"drtp.master.{g}" for g in ("run", "outputs", "series", "commands")],
    package_dir={"drtp": "drtp", "drtp.slurm": "slurm", **{f"drtp.{p}": p for p in PARTS}},
    package_data={"drtp.slurm": ["*.sbatch"]},
    install_requires=[
        "bottle>=0.12",
        "pyyaml>=6",
        "msgspec>=0.18",
        "pandas>=2",
        "numpy>=1.24",
        "matplotlib>=3.7",
        "seaborn>=0.13",
        "paramiko>=3",
        "pyarrow>=14",
        "tqdm>=4.60",
        "libcachesim>=0.3.5",  # standard eviction policies beside drtp's own caches
        "uhashring>=2",  # consistent hashing of trace clients to client nodes
        # the parser of registries' own metrics (drtp/registry/metrics.py); the live metrics exporter
        # (master/outputs/live_metrics.py: start_http_server returns its server and thread since 0.20, to stop it)
        "prometheus-client>=0.20",
        "scipy>=1.10",  # drtp analyze compare: bootstrap intervals and rank tests (analysis/compare.py)
        "httptools>=0.6",  # the client node's HTTP/1.1 answer parser (llhttp), drtp/registry/transport.py
        "uvloop>=0.17; sys_platform != 'win32'",  # the client node's event loop in stress mode, client/loop_engine.py
    ],
    extras_require={
        "test": ["pytest>=7", "ruff>=0.4", "hypothesis>=6", "nbclient>=0.8", "nbformat>=5", "ipykernel>=6"]
        + ["bcrypt>=4", "cryptography>=41"]  # real-registry tests: htpasswd, test CA and JWT signing
        # independent clients the tests read the registry with (import name dxf; NOT the CAD package "dxf")
        + ["python-dxf>=12", "requests>=2.28"],
    },
    entry_points={"console_scripts": ["drtp=drtp.cli:main"]},
)
