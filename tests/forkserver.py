"""A fork server for ``drtp`` processes: import drtp once, then fork a child per command line.

A fresh ``python -m drtp.cli`` spends most of its CPU importing drtp and what its commands load (pandas,
matplotlib, pyarrow, paramiko …) before it reads its input.  The server imports all of it once; each
request then forks a child that becomes what a fresh process would be: its own session (the caller can
kill its process group), the caller's rlimits, the given cwd, stdin from /dev/null, stdout and stderr to
the given files, the caller's environment, the signal dispositions and mask of a fresh interpreter, and
``sys.argv`` as ``-m`` sets it.  The child runs the entry point ``python -m drtp.cli`` runs and ends as the
interpreter would: SystemExit's code, an uncaught exception's traceback and exit 1, then non-daemon
threads joined, atexit handlers run and the standard streams flushed.

Run as a script by :class:`ForkServer`, which speaks to it in JSON lines over its stdin and stdout: a
request ``{"argv", "cwd", "stdout", "stderr"}`` is answered by ``{"pid"}`` as soon as the child exists
and ``{"code"}`` when it has ended (a signal as a negative number, as :mod:`subprocess` reports it).  The
server must fork from a single thread, so the thread pools numpy's BLAS and pyarrow's jemalloc would start
at import are switched off in its environment (:data:`SINGLE_THREAD_ENV`); the children get the caller's
environment back (the libraries keep one thread: only speed differs).
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

# what would start threads at import in the server, had it its default (each library reads it when loaded)
SINGLE_THREAD_ENV = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "JE_ARROW_MALLOC_CONF": "background_thread:false",  # pyarrow's jemalloc: no background purge thread
}
ADDED_ENV = "DRTP_FORKSERVER_ADDED"  # the names the caller added to the server's environment, comma-separated

# every package whose modules the commands import, at start or lazily (drtp.master, … live outside drtp/)
PRELOAD_PACKAGES = ("drtp", "drtp.master", "drtp.analysis", "drtp.plugins", "drtp.client")


def limits(memory_cap: int, file_cap: int) -> None:
    """Cap the calling process's address space and file size (a drtp process, fresh or forked)."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_cap, memory_cap))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the cap fails with EFBIG, no core dump
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_cap, file_cap))


# -- the server side (runs in its own process) ----------------------------------------------------------------


def _preload() -> None:
    """Import every module of drtp's packages, and so everything they import at start or lazily."""
    import importlib
    import pkgutil

    import drtp.cli

    drtp.cli.build_parser()  # the command modules, as every drtp process imports them
    for name in PRELOAD_PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)


def _dispositions() -> dict[int, Any]:
    """Every signal's handler as this fresh interpreter has it, to be given back to each child."""
    found = {}
    for signum in signal.valid_signals():
        handler = signal.getsignal(signum)
        if handler is None or signum in (signal.SIGKILL, signal.SIGSTOP):
            continue  # None: set outside Python, and inherited as is
        try:
            signal.signal(signum, handler)  # settable here: then settable in the child
        except (OSError, ValueError):
            continue
        found[signum] = handler
    return found


def _status(name: str) -> str:
    with open("/proc/self/status") as f:
        return next(line.split(":", 1)[1].strip() for line in f if line.startswith(name + ":"))


def _exit_code(e: SystemExit) -> int:
    """The exit status the interpreter gives a SystemExit that reaches it (printing a non-int code)."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _child(request: dict[str, Any], dispositions: dict[int, Any], added: list[str], server_fds: list[int]) -> None:
    """In the forked child: become a fresh ``drtp`` process, run it, and exit as the interpreter would."""
    try:
        os.setsid()
        limits(request["memory_cap"], request["file_cap"])
        os.chdir(request["cwd"])
        for fd, path, flags in (
            (0, os.devnull, os.O_RDONLY),
            (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        ):
            opened = os.open(path, flags, 0o666)
            os.dup2(opened, fd)
            os.close(opened)
        for fd in server_fds:
            os.close(fd)
        for name in added:  # the caller's environment, as a fresh process started by it would have
            os.environ.pop(name, None)
        os.environ.pop(ADDED_ENV, None)
        for signum, handler in dispositions.items():
            signal.signal(signum, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        import drtp.cli

        sys.argv = [drtp.cli.__file__, *request["argv"]]  # what ``python -m drtp.cli ARGV`` sees
        sys.path[0] = os.getcwd()  # ``-m`` puts the cwd first on the path
    except BaseException:  # the child could not be set up: say so where the caller reads, and no drtp ran
        import traceback

        traceback.print_exc()
        os._exit(125)
    code = 0
    try:
        sys.exit(drtp.cli.main())  # the line ``python -m drtp.cli`` runs
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    code = _finalize(code)
    os._exit(code & 0xFF)


def _finalize(code: int) -> int:
    """What the interpreter does at exit: join non-daemon threads, run atexit handlers, flush the streams."""
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's own wait for non-daemon threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            code = 120  # the interpreter's status when flushing stdout fails at exit
    return code


def serve() -> None:
    """Preload, say ready (with the server's thread count and size), then fork one child per request."""
    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(2, 1)  # anything printed while importing goes to the server's log, not into the replies
    os.close(null)
    added = [n for n in os.environ.get(ADDED_ENV, "").split(",") if n]
    dispositions = _dispositions()
    _preload()
    threads = int(_status("Threads"))
    replies.write(json.dumps({"ready": True, "threads": threads, "vmsize": _status("VmSize")}) + "\n")
    server_fds = [requests.fileno(), replies.fileno()]
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, dispositions, added, server_fds)
        replies.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")


# -- the caller's side ----------------------------------------------------------------------------------------


class ForkServerError(RuntimeError):
    """The server died, did not start, or is not fit to fork (it has threads)."""


class ForkServer:
    """One server process; :meth:`run` runs one command line at a time (one server per lane)."""

    def __init__(self, log: Path, memory_cap: int, file_cap: int, start_timeout_s: float = 600) -> None:
        self.memory_cap, self.file_cap = memory_cap, file_cap
        added = {k: v for k, v in SINGLE_THREAD_ENV.items() if k not in os.environ}
        env = {**os.environ, **added, ADDED_ENV: ",".join(added)}
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, __file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=log.parent,
                env=env,
            )
        self.log = log
        self._buffer = b""
        ready = self._reply(start_timeout_s)
        if ready is None or not ready.get("ready"):
            self.close()
            raise ForkServerError(f"the fork server did not start (see {log}): {ready}")
        self.vmsize: str = ready["vmsize"]
        if ready["threads"] != 1:
            self.close()
            raise ForkServerError(f"the fork server has {ready['threads']} threads after preloading: forking is unsafe")

    def _reply(self, timeout_s: float) -> dict[str, Any] | None:
        """The server's next reply, or None when none came within ``timeout_s``."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], timeout_s)
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise ForkServerError(f"the fork server ended (exit {self.proc.wait()}; see {self.log})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def run(self, argv: list[str], cwd: Path, stdout: Path, stderr: Path, hang_guard_s: float) -> int | None:
        """``drtp ARGV`` in a forked child: its exit code, or None when it ran past ``hang_guard_s`` (killed)."""
        assert self.proc.stdin is not None
        request = {"argv": argv, "cwd": str(cwd), "stdout": str(stdout), "stderr": str(stderr)}
        request |= {"memory_cap": self.memory_cap, "file_cap": self.file_cap}
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        started = self._reply(hang_guard_s)
        if started is None:
            raise ForkServerError("the fork server did not fork")
        ended = self._reply(hang_guard_s)
        if ended is not None:
            return int(ended["code"])
        try:
            os.killpg(started["pid"], signal.SIGKILL)  # the child leads its own session: its group is its pid
        except ProcessLookupError:
            pass
        self._reply(hang_guard_s)  # the server has reaped it: its status is of no use, the hang is the verdict
        return None

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    serve()
