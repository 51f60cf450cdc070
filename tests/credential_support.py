"""A Docker credential helper of the tests' own: a real ``docker-credential-NAME`` executable on PATH.

It speaks the helpers' protocol (``get`` with the server on stdin, ``{"ServerURL", "Username", "Secret"}``
JSON on stdout) and reads what to answer from files the test rewrites: ``NAME.user``, ``NAME.secret``.
Each call appends ``<argv> <server>`` to ``NAME.log``, so a test counts the calls (and sees that no secret
was in argv).  ``NAME.fail`` makes it fail: the file's text goes to stderr, ``NAME.stdout`` (if any) to
stdout, and it exits 1, as real helpers do.  ``NAME.delay`` (seconds) makes each call that slow.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_SCRIPT = """#!{python}
import json, pathlib, sys, time
here = pathlib.Path(__file__).parent
name = {name!r}
server = sys.stdin.read().strip()
if (here / (name + ".delay")).exists():
    time.sleep(float((here / (name + ".delay")).read_text()))
with open(here / (name + ".log"), "a") as log:
    log.write(" ".join(sys.argv[1:]) + " " + server + "\\n")
if (here / (name + ".fail")).exists():
    out = here / (name + ".stdout")
    if out.exists():
        sys.stdout.write(out.read_text())
    sys.stderr.write((here / (name + ".fail")).read_text())
    sys.exit(1)
if sys.argv[1:] != ["get"]:
    sys.exit(2)
raw = here / (name + ".raw")
if raw.exists():
    sys.stdout.write(raw.read_text())
    sys.exit(0)
user = (here / (name + ".user")).read_text()
secret = (here / (name + ".secret")).read_text()
print(json.dumps({{"ServerURL": server, "Username": user, "Secret": secret}}))
"""


class Helper:
    """``docker-credential-<name>`` in ``bin_dir`` (put on PATH by :func:`on_path`)."""

    def __init__(self, bin_dir: Path, name: str, user: str, secret: str) -> None:
        bin_dir.mkdir(parents=True, exist_ok=True)
        self.dir, self.name = bin_dir, name
        exe = bin_dir / f"docker-credential-{name}"
        exe.write_text(_SCRIPT.format(python=sys.executable, name=name))
        exe.chmod(0o755)
        self.set(user, secret)

    def set(self, user: str, secret: str) -> None:
        """What the next calls answer (written whole before the helper can read it)."""
        for suffix, text in (("user", user), ("secret", secret)):
            tmp = self.dir / f"{self.name}.{suffix}.tmp"
            tmp.write_text(text)
            os.replace(tmp, self.dir / f"{self.name}.{suffix}")

    def fail(self, stderr: str, stdout: str = "") -> None:
        if stdout:
            (self.dir / f"{self.name}.stdout").write_text(stdout)
        (self.dir / f"{self.name}.fail").write_text(stderr)

    def slow(self, seconds: float) -> None:
        (self.dir / f"{self.name}.delay").write_text(str(seconds))

    def answer_raw(self, text: str) -> None:
        (self.dir / f"{self.name}.raw").write_text(text)

    @property
    def calls(self) -> list[str]:
        log = self.dir / f"{self.name}.log"
        return log.read_text().splitlines() if log.exists() else []


def on_path(monkeypatch, bin_dir: Path) -> None:
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
