"""What a drtp process imports: only the named command's module, and ``drtp --help`` none of them.

``drtp --help`` lists the commands from drtp.cli's table of names and help lines; the table is
checked here against what the command modules register.  Which modules a process imports is read
from the process itself (its ``sys.modules`` at exit), never from how long it took.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from drtp.cli import COMMANDS, CONFIG_COMMAND, build_parser, named_command, register_module
from drtp.cli_options import DrtpArgumentParser
from tests.conftest import ibm_record, write_json

# what a command's module imports and no listing needs: the commands' own modules, and what they run with
HEAVY = ("pandas", "numpy", "pyarrow", "yaml", "msgspec", "drtp.trace.reader", "drtp.config", "drtp.registry.calls")
COMMAND_MODULES = sorted({c.module for c in COMMANDS} - {CONFIG_COMMAND})


# runs drtp as ``python -m drtp.cli`` does, and at exit (also argparse's, after --help) writes what was imported
IMPORTED = """\
import atexit, json, runpy, sys
out, sys.argv = sys.argv[1], ["drtp", *sys.argv[2:]]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
runpy.run_module("drtp.cli", run_name="__main__", alter_sys=True)
"""


def imported_by(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """The finished ``drtp ARGS`` process and the names of every module it imported (its ``sys.modules``)."""
    out = tmp_path / "modules.json"
    res = subprocess.run(
        [sys.executable, "-c", IMPORTED, str(out), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    modules = set(json.loads(out.read_text()))
    assert "drtp.cli_options" in modules, res.stderr[-2000:]  # the list is the process's: drtp's own imports are in it
    return res, modules


def registered_by(module: str) -> list[tuple[str, str]]:
    """(name, help line) of each subcommand ``module`` registers, in its order."""
    sub = DrtpArgumentParser(prog="drtp").add_subparsers(dest="command")
    register_module(module, sub)
    return [(action.dest, action.help) for action in sub._choices_actions]


def test_the_command_table_names_what_each_module_registers_with_its_help_line():
    modules = list(dict.fromkeys(c.module for c in COMMANDS))  # in the table's order
    registered = [(name, text, m) for m in modules for name, text in registered_by(m)]
    assert registered == [(c.name, c.help, c.module) for c in COMMANDS]


def test_the_full_parser_and_the_lazy_one_list_the_same_commands_and_help():
    full = build_parser()
    lazy = build_parser("inspect", every=False)
    assert lazy.format_help() == full.format_help()

    def choices(parser: argparse.ArgumentParser) -> list[str]:
        return list(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)

    assert choices(lazy) == choices(full) == [c.name for c in COMMANDS]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--help"], None),
        ([], None),
        (["-v", "run", "-c", "x.yaml"], "run"),
        (["-vv", "--verbose", "inspect", "t.json"], "inspect"),
        (["--", "inspect", "t.json"], "inspect"),
        (["--"], None),
        (["nosuch", "--help"], "nosuch"),
    ],
)
def test_the_named_command_is_the_first_word_that_is_not_an_option(argv, named):
    assert named_command(argv) == named


def test_help_lists_every_command_and_imports_none_of_their_modules(tmp_path):
    res, modules = imported_by(tmp_path, "--help")
    assert res.returncode == 0, res.stderr[-2000:]
    listing = {c.name: c.help for c in COMMANDS}
    for name, text in listing.items():
        assert f"\n  {name} " in res.stdout and text in res.stdout, name
    assert not modules & set(COMMAND_MODULES), modules & set(COMMAND_MODULES)
    for heavy in HEAVY:
        assert heavy not in modules, heavy
    assert not any(m.startswith(("drtp.master", "drtp.analysis", "drtp.plugins", "drtp.client")) for m in modules)


def test_an_unknown_command_is_refused_with_every_command_named_and_no_module_imported(tmp_path):
    res, modules = imported_by(tmp_path, "nosuch")
    assert res.returncode == 2
    assert res.stderr.splitlines()[-1].startswith("drtp: error: COMMAND: invalid choice: 'nosuch' (choose from ")
    assert all(f"'{c.name}'" in res.stderr for c in COMMANDS)
    assert not modules & set(COMMAND_MODULES)


def test_a_command_imports_its_own_module_only(tmp_path):
    trace = write_json(tmp_path / "t.json", [ibm_record(i) for i in range(20)])
    res, modules = imported_by(tmp_path, "inspect", str(trace))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "records" in res.stdout
    assert {"drtp.trace.cli", "drtp.trace.reader", "drtp.trace.summary"} <= modules
    assert not modules & (set(COMMAND_MODULES) - {"drtp.trace.cli"}), modules & set(COMMAND_MODULES)
    for heavy in ("pandas", "numpy", "pyarrow", "drtp.config", "drtp.registry.calls", "drtp.master.commands.clean"):
        assert heavy not in modules, heavy


def test_a_command_help_shows_its_own_options_with_only_its_module_imported(tmp_path):
    res, modules = imported_by(tmp_path, "clean", "--help")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "--yes" in res.stdout and "--registry" in res.stdout
    assert "drtp.master.commands.clean" in modules
    assert not modules & (set(COMMAND_MODULES) - {"drtp.master.commands.clean"}), modules & set(COMMAND_MODULES)
