"""A module of drtp by its name today, in whichever commit a bench round runs.

The benches that compare two commits (``--before``/``--after``) import drtp from the commit under test.
master/ was grouped into subpackages (master/run.py became master/run/replay.py, master/demo.py
master/commands/demo.py…): a round of a commit from before that finds each module under its older name.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

# today's name -> the name the module had before master/ was grouped
OLDER_NAMES = {
    "drtp.master.run.replay": "drtp.master.run",
    "drtp.master.run.warmup": "drtp.master.warmup",
    "drtp.master.commands.demo": "drtp.master.demo",
    "drtp.master.outputs.live_metrics": "drtp.master.live_metrics",
}


def grouped() -> bool:
    """Whether the drtp on the path has master/ in subpackages (``drtp.master.run`` a package, not a module).

    Asked of the layout, not by trying today's name first: an editable install of another checkout would
    answer for a module this commit lacks."""
    spec = importlib.util.find_spec("drtp.master.run")
    return spec is not None and spec.submodule_search_locations is not None


def drtp_module(name: str) -> ModuleType:
    """The module ``name`` of the drtp on the path, under its older name in a commit from before the move."""
    return importlib.import_module(name if grouped() else OLDER_NAMES.get(name, name))
