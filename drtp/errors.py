"""User-facing errors: the CLI prints them as one line and exits with the error's ``exit_code``."""

from drtp.exit_codes import ExitCode


class DrtpError(Exception):
    """A mistake in the user's input (config, trace, arguments), not a bug."""

    exit_code: ExitCode = ExitCode.BAD_INPUT


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
