"""User-facing errors: the CLI prints them as one line and exits with the error's ``exit_code``."""

import re

from drtp.exit_codes import ExitCode

# Characters that would break the one printed line: C0/C1 controls and Unicode line/paragraph separators.
_LINE_BREAKERS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with every character that could start a new line written as its escape (``\\n``, ``\\x1b``)."""
    return _LINE_BREAKERS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class DrtpError(Exception):
    """A mistake in the user's input (config, trace, arguments), not a bug.

    Its text is always one line: a key, URI or value quoted from hostile input may hold a
    line break, and a second line would pass for a second message in a log.
    """

    exit_code: ExitCode = ExitCode.BAD_INPUT

    def __str__(self) -> str:
        return one_line(super().__str__())


class RunError(DrtpError):
    """drtp could not run, or could not finish: something outside the input failed.

    The registry (preflight), a client node, or the results directory — not a
    mistake a user can see in the config or the trace, so it gets an exit code of
    its own: a script can retry this one, and should not retry a bad input.
    """

    exit_code = ExitCode.CANNOT_RUN


class TraceError(DrtpError):
    """A malformed trace record; the message names the file and record index."""

    def __init__(self, path: str, index: int, reason: str) -> None:
        self.path = path
        self.index = index
        self.reason = reason
        super().__init__(f"{path}: record {index}: {reason}")


class ConfigError(DrtpError):
    """An invalid config file; the message names the file and the key."""
