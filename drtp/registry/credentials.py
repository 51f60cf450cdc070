"""Where a registry's secret comes from, on the master: the config, a file, a Docker credential helper, a command.

A ``registries:`` entry names one source (the config checks there is only one):

* ``password`` — the literal (or ``${ENV}``) value;
* ``password_file`` — the whole file, its trailing newline dropped, so a
  multi-line JSON key (GCR's ``_json_key``) is a password too;
* ``credential_helper: NAME`` — ``docker-credential-NAME get`` with the registry's
  ``host[:port]`` on stdin, as Docker runs it, answering
  ``{"Username": …, "Secret": …}`` on stdout: the helpers users already have for
  ECR (``ecr-login``), GCR (``gcr``), ACR (``acr-env``) work unchanged;
* ``password_command`` — an argv list run without a shell; its stdout (trailing
  newline dropped) is the password, ``username:`` the user.

Secrets of the last two expire (an ECR password after 12 h, a GCR access token
after 1 h), so :class:`CredentialSource` asks again once ``credential_ttl`` is
nearly over, and on demand when the registry refused a secret that worked
before (:meth:`CredentialSource.renew`).  Everything here runs where the master
runs; client nodes get the secret only inside the signed run spec and the signed
secret updates that follow it.  The secret is never put in argv (a helper reads
the server on stdin), a log line or an error: a failing helper is reported with
its exit code and its stderr, never its stdout.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from typing import NamedTuple
from urllib.parse import urlsplit

from drtp.config import Config, RegistryEntry
from drtp.config.upstreams import all_entries
from drtp.errors import ConfigError, DrtpError, one_line
from drtp.units import parse_duration

log = logging.getLogger(__name__)

RETRY_S = 5.0  # after a failed renewal, the next try (the secret in hand is kept meanwhile)
COMMAND_TIMEOUT_S = 30.0  # a helper or command that has not answered by then is killed and reported
STDERR_SHOWN = 300  # characters of a failing helper's stderr in its error line
# credential_ttl when the entry gives none: ECR passwords live 12 h, GCR access tokens 1 h
DEFAULT_TTL_S = {"ecr-login": 11 * 3600.0, "gcr": 50 * 60.0}
# what docker-credential-helpers print (on stdout, with exit 1) when they hold nothing for the server:
# recognised exactly, so that no other stdout text is ever shown
NOT_FOUND = "credentials not found in native keychain"
IDENTITY_TOKEN_USER = "<token>"  # Docker's marker: the Secret is an OAuth2 identity (refresh) token


class CredentialError(DrtpError):
    """A helper or command could not give the secret: one line naming the registry and the source."""


class Secret(NamedTuple):
    """One answer of a source; ``generation`` counts the answers (0 the first), so a refusal names which one."""

    username: str | None
    password: str | None
    generation: int

    def __repr__(self) -> str:  # never the password in a log or traceback
        return f"Secret(username={self.username!r}, generation={self.generation})"


def server_of(url: str) -> str:
    """What Docker hands a credential helper for a registry: its ``host[:port]``."""
    return urlsplit(url.rstrip("/")).netloc


def renew_after(ttl_s: float) -> float:
    """Seconds after a secret was obtained at which it is asked for again: before its TTL runs out, with a
    margin of a tenth of it or 30 s (at most half of it), as bearer tokens are renewed."""
    return ttl_s - max(0.1 * ttl_s, min(30.0, ttl_s / 2))


def describe(entry: RegistryEntry) -> str:
    """The source of an entry's secret as messages name it ("credential_helper ecr-login")."""
    if entry.credential_helper:
        return f"credential_helper {entry.credential_helper}"
    if entry.password_command:
        return f"password_command {os.path.basename(entry.password_command[0])}"
    if entry.password_file:
        return f"password_file {entry.password_file}"
    return "password" if entry.password else ""


class CredentialSource:
    """One ``registries:`` entry's secret on the master: :meth:`current` (asked again once its TTL is nearly
    over) and :meth:`renew` (asked again now).  Thread-safe; the first answer is read when it is made, so a
    broken helper stops the command (exit 2) before anything runs."""

    def __init__(self, entry: RegistryEntry, cfg: Config, clock: Callable[[], float] = time.monotonic) -> None:
        self.entry = entry
        self.cfg = cfg
        self.clock = clock
        self.where = f"{cfg.source}: registries[{entry.id}]"
        self.name = entry.id
        self.describe = describe(entry)
        self.renewable = bool(entry.credential_helper or entry.password_command)
        self.ttl_s: float | None = None
        if entry.credential_ttl is not None:
            self.ttl_s = parse_duration(entry.credential_ttl)
        elif entry.credential_helper:
            self.ttl_s = DEFAULT_TTL_S.get(entry.credential_helper)
        self.lock = threading.Lock()
        self.renewals = 0  # answers after the first
        self.retry_at = 0.0  # after a failed renewal for the TTL, not asked again before this (clock seconds)
        self.secret = self._ask(0, ConfigError)
        self.obtained_at = clock()

    @property
    def due_in(self) -> float | None:
        """Seconds until the secret is to be asked for again (None: it never expires)."""
        if not self.renewable or self.ttl_s is None:
            return None
        return max(self.obtained_at + renew_after(self.ttl_s), self.retry_at) - self.clock()

    def current(self) -> Secret:
        """The secret, asked for again first when its TTL is nearly over (a failed renewal keeps the old one)."""
        due = self.due_in
        if due is not None and due <= 0:
            try:
                return self.renew(due=True)
            except CredentialError as e:
                log.warning("%s (the secret in hand is kept)", e)
        return self.secret

    def renew(self, refused: int | None = None, due: bool = False) -> Secret:
        """Ask the helper or command again; with ``refused`` (the generation a registry refused), only when
        no newer answer came since, so several refusals of one secret cost one renewal; with ``due`` (the TTL
        ran out), only when no other thread renewed it meanwhile, and not again before ``RETRY_S`` after a
        failure.  A source that cannot be asked again (a literal password, a file) returns what it has.
        Raises CredentialError."""
        with self.lock:
            if not self.renewable or (refused is not None and self.secret.generation > refused):
                return self.secret
            if due and (self.due_in or 0.0) > 0:
                return self.secret
            try:
                secret = self._ask(self.secret.generation + 1, CredentialError)
            except CredentialError:
                if refused is None:
                    self.retry_at = self.clock() + RETRY_S
                raise
            self.secret, self.obtained_at = secret, self.clock()
            self.renewals += 1
            log.info("%s: secret renewed from %s (generation %d)", self.where, self.describe, secret.generation)
            return secret

    # -- the sources ------------------------------------------------------------------------------

    def _ask(self, generation: int, error: type[DrtpError]) -> Secret:
        entry = self.entry
        if entry.credential_helper:
            username, password = self._helper(entry.credential_helper, error)
        elif entry.password_command:
            username, password = entry.username, self._command(entry.password_command, error)
        elif entry.password_file:
            username, password = entry.username, self._file(entry.password_file)
        else:
            username, password = entry.username, entry.password
        username, password = username or None, password or None
        if bool(username) != bool(password):
            missing = "password (or another secret source)" if username else "username"
            raise error(f"{self.where}: {missing} is missing")
        return Secret(username, password, generation)

    def _file(self, name: str) -> str:
        try:
            text = self.cfg.path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            raise ConfigError(f"{self.where}: cannot read password_file {name}") from None
        return _strip_newline(text)

    def _run(self, argv: list[str], stdin: bytes, what: str, error: type[DrtpError]) -> bytes:
        """stdout of ``argv`` fed ``stdin``, in bounded time; an error line with its stderr otherwise."""
        # a bare name is looked up on PATH; a path is relative to the config's folder, as every path of it
        exe = shutil.which(argv[0]) if os.sep not in argv[0] else str(self.cfg.path(argv[0]))
        if exe is None:
            raise error(f"{self.where}: {what}: {argv[0]} not found on PATH")
        try:
            p = subprocess.run(
                [exe, *argv[1:]], input=stdin, capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            raise error(f"{self.where}: {what}: no answer within {COMMAND_TIMEOUT_S:g} s (killed)") from None
        except OSError as e:
            raise error(f"{self.where}: {what}: cannot run {argv[0]} ({e.strerror or e})") from None
        if p.returncode != 0:
            said = _stderr_line(p.stderr)
            if p.stdout.strip() == NOT_FOUND.encode():
                said = said or f"it holds no credentials for {server_of(self.entry.url)}"
            raise error(f"{self.where}: {what}: exited with {_exit_text(p.returncode)}" + (f": {said}" if said else ""))
        return p.stdout

    def _helper(self, name: str, error: type[DrtpError]) -> tuple[str, str]:
        what = f"credential_helper {name}"
        if self.entry.username:
            raise ConfigError(f"{self.where}: username comes from the {what}: drop 'username'")
        server = server_of(self.entry.url)
        out = self._run([f"docker-credential-{name}", "get"], server.encode() + b"\n", what, error)
        try:
            data = json.loads(out)
            username, secret = data["Username"], data["Secret"]
        except (ValueError, KeyError, TypeError):
            raise error(f"{self.where}: {what}: answered no JSON with Username and Secret for {server}") from None
        if not isinstance(username, str) or not isinstance(secret, str) or not username or not secret:
            raise error(f"{self.where}: {what}: answered an empty Username or Secret for {server}")
        if username == IDENTITY_TOKEN_USER:
            # an OAuth2 refresh token for the registry's token server, not a password: sent as a basic
            # password it would be refused (or worse, logged by a server that does not expect it)
            raise error(
                f"{self.where}: {what}: answered an identity token (Username {IDENTITY_TOKEN_USER}), which drtp "
                "does not exchange; use a helper that gives a username and password/access token, or password_command"
            )
        return username, secret

    def _command(self, argv: list[str], error: type[DrtpError]) -> str:
        what = f"password_command {os.path.basename(argv[0])}"
        out = self._run(argv, b"", what, error)
        try:
            password = _strip_newline(out.decode("utf-8"))
        except UnicodeDecodeError:
            raise error(f"{self.where}: {what}: its output is not UTF-8 text") from None
        if not password:
            raise error(f"{self.where}: {what}: printed no password")
        return password


def _strip_newline(text: str) -> str:
    """``text`` without its trailing line ends; everything else (inner lines too) is the secret."""
    return text.rstrip("\r\n")


def _stderr_line(stderr: bytes) -> str:
    """A helper's stderr as part of one line, bounded."""
    text = " | ".join(line.strip() for line in stderr.decode("utf-8", "replace").splitlines() if line.strip())
    text = one_line(text)
    return text if len(text) <= STDERR_SHOWN else text[: STDERR_SHOWN - 1] + "…"


def _exit_text(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"code {code}"


def config_sources(cfg: Config) -> list[CredentialSource]:
    """The credential source of every ``registries:`` entry and upstream (drtp.config.upstreams.all_entries: the
    order of drtp.registry.auth.config_auth), helpers and commands asked once, now."""
    return [CredentialSource(e, cfg) for e in all_entries(cfg)]
