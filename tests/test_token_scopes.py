"""Bearer tokens against a real registry and a real token server: cached per scope, renewed before they expire."""

from __future__ import annotations

import threading
import time

import pytest

from drtp.registry.auth import Authenticator, token_times
from drtp.registry.local import LocalRegistry
from drtp.registry.transport import Connection
from drtp.replay.messages import RegistryAuth
from tests.realreg_support import PASSWORD, USER, Pki, TokenServer

pytestmark = pytest.mark.registry


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory):
    d = tmp_path_factory.mktemp("token")
    pki = Pki(d / "pki")
    server = TokenServer(d, pki, expires_in=120)
    with LocalRegistry(d / "reg", tls=(pki.cert, pki.key), token=server.registry_config) as reg:
        yield reg, server, pki.ca.read_text()
    server.stop()


def get(auth: Authenticator, conn: Connection, path: str) -> tuple[int, int]:
    """GET ``path`` as a node does: with the cached header, once more after a 401 challenge. (first, final) status."""
    sent = auth.header(path)
    first = conn.request("GET", path, headers=sent)
    if first.status == 401 and auth.challenge(path, first.header("www-authenticate"), sent):
        return first.status, conn.request("GET", path, headers=auth.header(path)).status
    return first.status, first.status


def test_a_token_per_scope_reused_by_the_requests_of_that_scope(token_registry):
    reg, server, ca = token_registry
    auth = Authenticator(RegistryAuth(reg.url, USER, PASSWORD, ca))
    conn = Connection("https", reg.host, 10.0, auth.ssl)
    issued = server.issued
    assert get(auth, conn, "/v2/team/one/manifests/latest") == (401, 404)  # challenged, then answered
    assert get(auth, conn, "/v2/team/one/manifests/other") == (404, 404)  # the cached token: no challenge
    assert get(auth, conn, "/v2/team/one/blobs/sha256:" + "0" * 64) == (404, 404)
    assert server.issued == issued + 1
    assert get(auth, conn, "/v2/team/two/manifests/latest") == (401, 404)  # another repository, another scope
    assert server.issued == issued + 2
    assert server.scopes[-2:] == ["repository:team/one:pull", "repository:team/two:pull"]
    assert get(auth, conn, "/v2/team/one/manifests/latest") == (404, 404)  # the first scope's token still serves
    assert server.issued == issued + 2


def test_a_token_is_renewed_before_it_expires_without_a_401(token_registry):
    reg, server, ca = token_registry
    clock = FakeClock()
    auth = Authenticator(RegistryAuth(reg.url, USER, PASSWORD, ca), clock=clock)
    conn = Connection("https", reg.host, 10.0, auth.ssl)
    path = "/v2/renew/me/manifests/latest"
    assert get(auth, conn, path) == (401, 404)
    issued = server.issued
    first = auth.header(path)
    renew_at, expires_at = token_times(clock.now, 120)
    assert (renew_at, expires_at) == (clock.now + 90, clock.now + 120)  # 30 s before the end of 120 s
    clock.now = renew_at - 1
    assert get(auth, conn, path) == (404, 404) and server.issued == issued  # not yet
    clock.now = renew_at + 1  # inside the renewal window: the request goes with the old, still valid token ...
    assert auth.header(path) == first
    deadline = time.monotonic() + 20
    while (auth.renewing or server.issued == issued) and time.monotonic() < deadline:
        time.sleep(0.02)  # ... while a new one is fetched in the background
    assert server.issued == issued + 1 and auth.renew_errors == 0
    renewed = auth.header(path)
    assert renewed != first
    clock.now = expires_at + 1  # the first token's end: the renewed one serves, no 401
    assert auth.header(path) == renewed
    assert get(auth, conn, path) == (404, 404)


def test_a_token_due_for_renewal_never_waits_for_another_requests_token_fetch(token_registry):
    """A node's event loop asks :meth:`Authenticator.header` for every request: a token due for renewal
    starts its renewal and is used at once, even while another request's challenge is fetching a token
    (which holds the fetch lock as long as the token server takes)."""
    reg, server, ca = token_registry
    clock = FakeClock()
    auth = Authenticator(RegistryAuth(reg.url, USER, PASSWORD, ca), clock=clock)
    path = "/v2/due/soon/manifests/latest"
    assert get(auth, Connection("https", reg.host, 10.0, auth.ssl), path) == (401, 404)
    first, issued = auth.header(path), server.issued
    clock.now = token_times(clock.now, 120)[0] + 1  # inside the renewal window, still valid
    server.hold, server.holding = threading.Event(), threading.Event()
    other = Connection("https", reg.host, 10.0, auth.ssl)
    challenged = threading.Thread(target=get, args=(auth, other, "/v2/other/scope/manifests/latest"), daemon=True)
    challenged.start()
    answered: list[dict] = []
    try:
        assert server.holding.wait(30)  # the other request's challenge is fetching its token: the server holds it
        asking = threading.Thread(target=lambda: answered.append(auth.header(path)), daemon=True)
        asking.start()
        asking.join(30)  # returns at once unless it waits for the held fetch (then not before the hold ends)
        assert answered == [first] and auth.renewing == {auth.scope_of["due/soon"]}
    finally:
        server.hold.set()
        challenged.join(30)
        server.hold = None
    deadline = time.monotonic() + 20
    while (auth.renewing or server.issued < issued + 2) and time.monotonic() < deadline:
        time.sleep(0.02)  # the held fetch and the renewal both end with a token
    assert server.issued == issued + 2 and auth.renew_errors == 0 and auth.header(path) != first


def test_token_times_renew_a_tenth_of_a_long_life_before_and_half_of_a_short_one():
    assert token_times(0.0, 3600.0) == (3240.0, 3600.0)
    assert token_times(0.0, 60.0) == (30.0, 60.0)
    assert token_times(0.0, 10.0) == (5.0, 10.0)
