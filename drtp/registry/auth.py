"""Registry credentials and TLS trust: basic auth, the Docker bearer-token flow, CA bundles.

The config's ``registries:`` entries become :class:`RegistryAuth` records
(resolved on the master from the entry's secret source, drtp.registry.credentials,
and the CA file's text) that travel to client nodes only inside the signed run
spec; a renewed secret follows in a signed secret update and replaces the one an
:class:`Authenticator` uses (:meth:`Authenticator.replace_secret`).  Both the
nodes and :mod:`drtp.registry.calls` authenticate from them, through one
:class:`Authenticator` per registry (its token fetch on drtp's own connection):

* **Basic**: the registry answers 401 with ``WWW-Authenticate: Basic``; the
  request is sent again with ``Authorization: Basic …`` and every later request
  to that registry carries it.
* **Bearer** (Docker token flow): 401 with ``WWW-Authenticate: Bearer
  realm=…,service=…,scope=…``; a token is fetched from the realm (with the
  basic credentials, if any) for that scope and cached per scope: a repository's
  requests carry the token of the scope its last challenge asked for, and a
  second repository, or a wider scope (pull, then push), gets a token of its own.
  A token is renewed before it expires, as Docker clients do: once less than 30 s
  (or a tenth of a longer life) is left, the next request that uses it starts a
  renewal in the background and goes on with the still-valid token, so no request
  waits for the token server and none meets a 401 for an expired token.  A 401 on
  a cached token (revoked, or a wider scope needed) still fetches a new one.

Plain http, or https without verification, is used only when the entry says
``insecure: true``.  Passwords are never printed: :func:`masked` is what the
results and logs see.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import threading
import time
from collections.abc import Callable
from typing import NamedTuple
from urllib.parse import urlencode, urlsplit

import msgspec

from drtp.config import Config, RegistryEntry
from drtp.config.upstreams import all_entries
from drtp.errors import ConfigError, DrtpError
from drtp.registry.credentials import CredentialSource, describe
from drtp.registry.transport import Connection, RequestError
from drtp.replay.messages import RegistryAuth, registry_base

IDEMPOTENT = frozenset(("GET", "HEAD"))  # the only methods that may be sent again (``retries``, a renewal)
_PARAM = re.compile(r'(\w+)\s*=\s*"([^"]*)"')
DEFAULT_TOKEN_LIFE_S = 60.0  # a token response without expires_in lives this long (the Docker token spec)
RENEW_BEFORE_S = 30.0  # renew a token this long before it expires (at most half its life) ...
RENEW_FRACTION = 0.1  # ... or this fraction of its life before, if that is longer
_REPO = re.compile(r"^/v2/(.+?)/(?:blobs|manifests|tags)/")


class AuthError(DrtpError):
    """A registry refused the credentials (or none were given): one clear line.

    ``refused``: the token server answered 401 to the basic credentials (the secret itself was refused).
    """

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


def entry_auth(entry: RegistryEntry, cfg: Config, source: CredentialSource | None = None) -> RegistryAuth:
    """The wire record of one ``registries:`` entry, with ``source``'s current secret (a source of its own,
    asked now, when none is given); checks URL scheme vs ``insecure``."""
    where = f"{cfg.source}: registries[{entry.id}]"
    url = entry.url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: url must be http(s)://host:port, not {entry.url!r}")
    if url.startswith("http://") and not entry.insecure:
        raise ConfigError(f"{where}: plain http ({url}) is allowed only with 'insecure: true'")
    secret = (source or CredentialSource(entry, cfg)).current()
    ca_pem = None
    if entry.ca_file:
        try:
            ca_pem = cfg.path(entry.ca_file).read_text()
        except OSError as e:
            raise ConfigError(f"{where}: cannot read ca_file {entry.ca_file} ({e.strerror})") from None
    return RegistryAuth(
        url,
        secret.username,
        secret.password,
        ca_pem,
        entry.insecure and url[:5] == "https",
        source=describe(entry),
        name=entry.id,
        renewable=bool(entry.credential_helper or entry.password_command),
        generation=secret.generation,
    )


def config_auth(cfg: Config, sources: list[CredentialSource] | None = None) -> list[RegistryAuth]:
    """Auth records of every ``registries:`` entry and of each entry's upstream (drtp.config.upstreams: empty
    when the config has only ``registry:``), from ``sources`` (one per entry, in that order,
    drtp.registry.credentials.config_sources) when the caller keeps them to renew the secrets."""
    entries = all_entries(cfg)
    if sources is None:
        return [entry_auth(e, cfg) for e in entries]
    return [entry_auth(e, cfg, s) for e, s in zip(entries, sources, strict=True)]


def registry_names(cfg: Config) -> dict[str, str]:
    """Registry URL → its id in ``registries:`` (an upstream's: ``<id>-upstream``), for messages."""
    return {e.url.rstrip("/"): e.id for e in all_entries(cfg)}


def masked(auth: RegistryAuth) -> str:
    return f"{auth.registry} as {auth.username}" if auth.username else f"{auth.registry} (anonymous)"


def ssl_context(auth: RegistryAuth | None) -> ssl.SSLContext:
    """Verification against the entry's CA bundle, the system's, or none (``insecure``)."""
    if auth is not None and auth.insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    ctx = ssl.create_default_context()  # the system's CAs (a token server may use a public one) ...
    if auth is not None and auth.ca_pem:
        ctx.load_verify_locations(cadata=auth.ca_pem)  # ... and the entry's bundle
    return ctx


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="…",service="…"`` → ("bearer", {realm, service, …})."""
    scheme, _, rest = header.strip().partition(" ")
    return scheme.lower(), dict(_PARAM.findall(rest))


def repository_of(path: str) -> str:
    m = _REPO.match(path)
    return m.group(1) if m else ""


class Token(NamedTuple):
    """A bearer token and when (on the authenticator's clock) to renew it and when it expires."""

    value: str
    renew_at: float
    expires_at: float


def token_times(now: float, life_s: float) -> tuple[float, float]:
    """(renew at, expires at) for a token of ``life_s`` seconds received at ``now``."""
    before = max(RENEW_FRACTION * life_s, min(RENEW_BEFORE_S, life_s / 2))
    return now + life_s - before, now + life_s


class Authenticator:
    """The Authorization header for one registry's requests; shared by a node's threads (and its event loop:
    :meth:`header` never waits for the network)."""

    def __init__(
        self, auth: RegistryAuth | None, timeout: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.auth = auth
        self.timeout = timeout
        self.clock = clock
        self.ssl = ssl_context(auth)
        self.basic = _basic(auth.username, auth.password) if auth is not None else None
        # the secret's renewals: which answer of the master's source it is, whether the registry accepted
        # it (a refusal of a secret that never worked is a wrong secret, not an expired one), and the
        # refusals not yet reported to the master (a node's result stream carries them)
        self.generation = auth.generation if auth is not None else 0
        # the generation whose value the secret has now: a renewal that brings the same value back (a helper
        # asked again at its TTL) is a new generation, but nothing the registry sees changed
        self.value_generation = self.generation
        self.proven = False
        self.reported: set[int] = set()  # generations whose refusal was handled
        self.waited_out: set[int] = set()  # generations whose renewal a read waited for in vain
        self.refusals: list[int] = []
        self.source: CredentialSource | None = None  # on the master: renew from it directly
        self.renewed = threading.Condition()  # notified when a newer secret is installed
        self.mode = ""  # "", "basic" or "bearer" once the registry has asked
        self.tokens: dict[str, Token] = {}  # scope -> its token
        self.scope_of: dict[str, str] = {}  # repository ("" for /v2/) -> the scope its last challenge asked for
        self.challenges: dict[str, dict[str, str]] = {}  # scope -> the challenge's parameters (to renew it)
        self.renewing: set[str] = set()  # scopes whose renewal is under way
        self.renew_errors = 0  # renewals that failed (the token in hand is used until it expires)
        self.lock = threading.Lock()  # one token fetch at a time: held across the fetch
        # guards ``renewing`` alone: :meth:`header` takes it, never ``lock``, so no request (nor a node's
        # event loop) waits for another request's token fetch
        self.renewing_lock = threading.Lock()

    def header(self, path: str) -> dict[str, str]:
        if self.source is not None:  # the master's own requests: the source's secret, renewed near its TTL
            secret = self.source.current()
            if secret.generation != self.generation:
                self.replace_secret(secret)
        if self.mode == "basic" and self.basic:
            return {"Authorization": self.basic}
        if self.mode == "bearer":
            scope = self.scope_of.get(repository_of(path))
            token = self.tokens.get(scope) if scope is not None else None
            if token is not None:
                now = self.clock()
                if now >= token.renew_at:
                    self._renew_soon(scope)
                if now < token.expires_at:
                    return {"Authorization": "Bearer " + token.value}
        return {}

    def challenge(self, path: str, www_authenticate: str | None, sent: dict[str, str]) -> bool:
        """After a 401 to a request sent with headers ``sent``: get what the challenge asks for.

        True if the request is worth sending again (its Authorization would now differ).
        """
        if not www_authenticate:
            return False
        scheme, params = parse_challenge(www_authenticate)
        if scheme == "basic":
            self.mode = "basic"
        elif scheme == "bearer" and params.get("realm"):
            repo = repository_of(path)
            scope = params.get("scope", "")
            with self.lock:  # one token fetch at a time; a thread that finds a newer token just uses it
                token = self.tokens.get(scope)
                stale = token is None or ("Bearer " + token.value) == sent.get("Authorization")
                if self.mode != "bearer" or stale or self.clock() >= token.expires_at:
                    self._store(scope, params, self.fetch_token(params))
                self.scope_of[repo] = scope
                self.mode = "bearer"
        else:
            return False
        fresh = self.header(path)
        return bool(fresh) and fresh != sent

    # -- the secret behind the headers ------------------------------------------------------------

    def use_source(self, source: CredentialSource) -> None:
        """On the master: take the secret from ``source``, asked again before its TTL runs out and at once
        when the registry refuses it (:meth:`note_refused`)."""
        self.source = source
        self.replace_secret(source.current())  # nothing to do when this authenticator's record came from it

    def replace_secret(self, secret) -> bool:
        """Install a renewed secret (``username``, ``password``, ``generation``) unless one as new is in place.

        Cached bearer tokens stay: those fetched with the old secret serve until they expire or meet a 401;
        every later token fetch and basic header uses the new one.
        """
        with self.renewed:
            if secret.generation <= self.generation or self.auth is None:
                return False
            basic = _basic(secret.username, secret.password)
            if basic != self.basic:
                self.proven = False  # a new value has not worked yet
                self.value_generation = secret.generation
            self.auth = msgspec.structs.replace(
                self.auth, username=secret.username, password=secret.password, generation=secret.generation
            )
            self.basic = basic
            self.generation = secret.generation
            self.renewed.notify_all()
        return True

    def answered(self, sent: dict[str, str], status: int) -> None:
        """A request sent with ``sent`` got ``status``: a basic header other than 401'd proves the secret."""
        if status != 401 and self.basic is not None and sent.get("Authorization") == self.basic:
            self.proven = True

    def secret_refused(self, sent: dict[str, str], status: int, error: AuthError | None, generation: int) -> bool:
        """Whether a request sent with the secret of ``generation`` met a 401 that refused the secret itself
        (the token server refused it, or a basic registry answered 401 to it), and that secret had worked
        before — or its refusal is being renewed already, or a newer one is in place: worth a renewal and,
        for a read, a second send."""
        if status != 401 or self.basic is None:
            return False
        if not (self.proven or generation in self.reported or generation < self.generation):
            return False
        if error is not None:
            return error.refused
        return self.mode == "basic" and sent.get("Authorization", "").startswith("Basic ")

    def replaced_under(self, method: str, sent: dict[str, str], generation: int) -> bool:
        """Whether a write sent with the secret of ``generation`` met its 401 after a renewed secret of another
        value replaced that one: sending it again would send a write twice (the challenge's own second send,
        of a request that went without credentials, is not that; nor is a renewal that brought the same value
        back, which the registry cannot tell from no renewal: the 401 was a plain challenge)."""
        return method not in IDEMPOTENT and bool(sent) and self.value_generation > generation

    def note_refused(self, generation: int) -> None:
        """The registry refused the secret of ``generation``: renew it once.  On the master the source is asked
        again now; on a node the refusal waits in :attr:`refusals` for the result stream to report it."""
        with self.renewed:
            if generation < self.generation or generation in self.reported:
                return
            self.reported.add(generation)
            self.proven = False  # refused now: the same value coming back renewed is not worth another renewal
            if self.source is None:
                self.refusals.append(generation)
                return
        try:
            self.replace_secret(self.source.renew(refused=generation))
        except DrtpError:
            return  # the source's error was logged by it; the request's row names the refusal

    def take_refusals(self) -> list[int]:
        """The refusals not yet reported (each reported once)."""
        with self.renewed:
            out, self.refusals = self.refusals, []
        return out

    def wait_renewed(self, generation: int, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until a secret newer than ``generation`` is installed (on the master,
        :meth:`note_refused` renewed it already, or could not)."""
        with self.renewed:
            if self.source is not None:
                return self.generation > generation
            if generation in self.waited_out:  # no renewal came in time once: the next reads do not wait again
                return self.generation > generation
            if not self.renewed.wait_for(lambda: self.generation > generation, timeout):
                self.waited_out.add(generation)
                return False
            return True

    def refusal(self, detail: str = "") -> str:
        """The error of a request whose last answer was a 401 to this registry's secret: the registry, where
        the secret comes from (never the secret), and ``detail``."""
        a = self.auth
        who = f"registry {a.name} ({a.registry})" if a.name else f"registry {a.registry}"
        text = f"{who} refused the credentials of user {a.username!r} from {a.source or 'the config'} (HTTP 401)"
        return f"{text}; {detail}" if detail else text

    def _store(self, scope: str, params: dict[str, str], answer: tuple[str, float]) -> None:
        value, life_s = answer
        renew_at, expires_at = token_times(self.clock(), life_s)
        self.tokens[scope] = Token(value, renew_at, expires_at)
        self.challenges[scope] = params

    def _renew_soon(self, scope: str) -> None:
        """Fetch a new token for ``scope`` in the background; the caller goes on with the one it has."""
        with self.renewing_lock:
            if scope in self.renewing or scope not in self.challenges:
                return
            self.renewing.add(scope)
        threading.Thread(target=self._renew, args=(scope,), name="drtp-token-renewal", daemon=True).start()

    def _renew(self, scope: str) -> None:
        try:
            params = self.challenges[scope]
            answer = self.fetch_token(params)
            with self.lock:
                self._store(scope, params, answer)
        except AuthError:
            self.renew_errors += 1  # the token in hand serves until it expires; then a 401 fetches again
        finally:
            with self.renewing_lock:
                self.renewing.discard(scope)

    def fetch_token(self, params: dict[str, str]) -> tuple[str, float]:
        """GET realm?service=…&scope=… (with basic credentials): (token, its life in seconds); AuthError if refused."""
        realm = urlsplit(params["realm"])
        if self.basic and realm.scheme != "https" and registry_base(self.auth.registry).startswith("https://"):
            # the registry is reached over TLS: its password must not cross the network in clear text
            raise AuthError(f"token server {realm.netloc} is plain http: the credentials of {masked(self.auth)} stay")
        query = [(k, params[k]) for k in ("service", "scope") if params.get(k)]
        path = (realm.path or "/") + "?" + "&".join(filter(None, [realm.query, urlencode(query)]))
        https = realm.scheme == "https"
        conn = Connection(realm.scheme, realm.netloc, self.timeout, self.ssl if https else None)
        basic = self.basic  # the secret this fetch proves or is refused with
        headers = {"Authorization": basic} if basic else {}
        try:
            resp = conn.request("GET", path, None, headers, keep_body=True)
        except RequestError as e:
            raise AuthError(f"token server {realm.netloc} does not answer ({e.outcome}: {e.message})") from None
        finally:
            conn.close()
        body = resp.body
        who = f"user {self.auth.username!r}" if basic else "anonymous (no username/password configured)"
        if resp.status in (401, 403):
            # a 401 refuses the secret itself (worth a renewal); a 403 refuses what the user may do
            refused = basic is not None and resp.status == 401
            raise AuthError(f"token server {realm.netloc} refused {who}: HTTP {resp.status}", refused=refused)
        try:
            data = json.loads(body)
            token = data.get("token") or data["access_token"]
            life_s = float(data.get("expires_in") or DEFAULT_TOKEN_LIFE_S)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise AuthError(f"token server {realm.netloc} gave no token (HTTP {resp.status})") from None
        if not isinstance(token, str) or not token or not 0 < life_s < 1e7:
            raise AuthError(f"token server {realm.netloc} gave no usable token (HTTP {resp.status})")
        if basic is not None and basic == self.basic:
            self.proven = True
        return token, life_s


def _basic(username: str | None, password: str | None) -> str | None:
    """The ``Authorization: Basic`` value of a username and password (None without a username)."""
    if not username:
        return None
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def auth_for(registry: str, auths: list[RegistryAuth]) -> RegistryAuth | None:
    base = registry_base(registry)
    return next((a for a in auths if registry_base(a.registry) == base), None)
