"""User-facing errors: the CLI prints them as one line and exits non-zero."""


class DrtpError(Exception):
    """A mistake in the user's input (config, trace, arguments), not a bug."""


class TraceError(DrtpError):
    """A malformed trace record; the message names the file and record index."""

    def __init__(self, path: str, index: int, reason: str) -> None:
        self.path = path
        self.index = index
        self.reason = reason
        super().__init__(f"{path}: record {index}: {reason}")


class ConfigError(DrtpError):
    """An invalid config file; the message names the file and the key."""
