"""drtp's own calls to one registry, by name: the Distribution protocol for everything but the replay itself.

A :class:`RegistryCalls` is what drtp's tools use to talk to a registry —
warmup's existence checks, blob pushes and cross-repository mounts, manifest
puts, capture's object sizes, the demo's round trip, the local registry's
readiness probe — so that no module outside ``drtp.registry`` sends a registry
request of its own.  It sends through :class:`drtp.registry.session.Session`,
the same connections, credentials (basic, bearer tokens cached per scope),
TLS trust and redirect rule as the client nodes' thread engine: one HTTP stack
for every registry request drtp makes.  (It is named for what it is — calls
drtp makes of its own — not "client": in drtp a client is a client node or a
trace client.)

A call that does not get the answer it needs raises :class:`RegistryError`,
which says what was asked, what came back (a status, or the failure class of a
request that got no complete answer) and why.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from urllib.parse import urlencode, urljoin, urlsplit

from drtp.registry.manifest import ACCEPT, SCHEMA2
from drtp.registry.session import Session
from drtp.registry.transport import USER_AGENT, RequestError, Response
from drtp.replay.messages import RegistryAuth, registry_base

OBJECT_PATHS = {"blob": "blobs", "manifest": "manifests"}

# What a DELETE did: the object is gone now, was gone already, or the registry does not delete (its storage has
# deletes disabled, or it manages repositories through an API of its own).
DELETED, GONE, REFUSED = "deleted", "gone", "refused"


class RegistryError(Exception):
    """A registry call that did not get the answer it needs.

    ``status`` is the HTTP status (0 when no complete answer came) and ``outcome`` the
    drtp.replay.outcome class of a request that got none ("" when an answer came).
    """

    def __init__(self, what: str, r: Response, why: str = "") -> None:
        self.status = r.status
        self.outcome = r.outcome
        got = f"{r.outcome}: {r.error}" if r.outcome else f"HTTP {r.status}" + (f" ({r.error})" if r.error else "")
        super().__init__(f"{what}: {got}" + (f": {why}" if why else ""))


REGISTRY_ERRORS: tuple[type[Exception], ...] = (RegistryError,)
"""What a call of :class:`RegistryCalls` raises when the registry refuses it or cannot be reached."""


class RegistryCalls:
    """Named Distribution calls to one registry (``host:port`` or a URL), with its credentials and TLS trust.

    Safe to share between threads: each thread has its own connections; a bearer token is shared.
    """

    def __init__(
        self, registry: str, auth: RegistryAuth | None = None, timeout: float = 60.0, agent: str = USER_AGENT
    ) -> None:
        """``agent``: the User-Agent of every call (drtp.registry.transport.DIRECT_USER_AGENT to a cache's
        upstream, whose log then tells drtp's own requests from the cache's fetches)."""
        self.registry = registry
        self.base = registry_base(registry)
        self.timeout = timeout
        if auth is not None and registry_base(auth.registry) != self.base:
            auth = None  # credentials of another registry are never sent here
        self.session = Session([auth] if auth is not None else [], timeout, agent=agent)

    def use_source(self, registry: str, source) -> None:
        """Take this registry's secret from a master's credential source (renewed near its TTL and when
        refused) — nothing when ``registry`` is another registry."""
        if registry_base(registry) != self.base:
            return
        for auth in self.session.auth.values():
            auth.use_source(source)

    def _url(self, repo: str, kind: str, ref: str) -> str:
        return f"{self.base}/v2/{repo}/{OBJECT_PATHS[kind]}/{ref}"

    def ping(self) -> int:
        """The HTTP status of an anonymous ``GET /v2/``: 200 open, 401 asking for credentials.

        Raises RegistryError when nothing answers.
        """
        u = urlsplit(self.base)
        try:  # this thread's connection, without the credentials: what a caller that knows none sees
            r = self.session.connection(u.scheme, u.netloc).request("GET", "/v2/")
        except RequestError as e:
            raise RegistryError(f"GET {self.base}/v2/", Response.failed(e)) from None
        return r.status

    def exists(self, kind: str, repo: str, digest: str) -> bool:
        """Whether the registry answers a ``HEAD`` of the blob or manifest ``digest`` in ``repo`` with 200."""
        return self.session.request("HEAD", self._url(repo, kind, digest)).status == 200

    def push_blob(self, repo: str, data: bytes | Iterable[bytes], digest: str, size: int | None = None) -> bool:
        """Upload a blob unless ``repo`` has it: ``data`` is its bytes, or an iterator of chunks of ``size``
        bytes in all whose hash is ``digest`` (sent as they come, never held whole).

        True when it was uploaded, False when ``repo`` had it already."""
        if self.exists("blob", repo, digest):
            return False
        if not isinstance(data, bytes | bytearray):
            if size is None:
                raise ValueError("a blob pushed as a stream of chunks needs its size")
            chunks = data
            body, length = (lambda: iter(chunks)), size
        else:
            body, length = bytes(data), len(data)
        location = self._open_upload(repo)
        self._close_upload(location, digest, body, length)
        return True

    def _open_upload(self, repo: str) -> str:
        what = f"POST {self.base}/v2/{repo}/blobs/uploads/"
        r = self.session.request("POST", f"{self.base}/v2/{repo}/blobs/uploads/")
        if r.status != 202:
            raise RegistryError(what, r, "no upload opened")
        if not r.header("location"):
            raise RegistryError(what, r, "202 without a Location header")
        return urljoin(self.base + "/", r.header("location"))

    def _close_upload(self, location: str, digest: str, body, length: int) -> None:
        sep = "&" if "?" in location else "?"
        url = location + sep + urlencode({"digest": digest})
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(length)}
        r = self.session.request("PUT", url, body=body, headers=headers)
        if r.status != 201:
            raise RegistryError(f"PUT {_without_query(url)} (blob {digest})", r, "the blob was not stored")

    def mount_blob(self, repo: str, from_repo: str, digest: str) -> None:
        """Make ``from_repo``'s blob ``digest`` part of ``repo`` without sending its bytes.

        A registry that refuses to mount opens an upload instead (202): that upload is cancelled and
        RegistryError raised, so the caller may push the blob.
        """
        query = urlencode({"mount": digest, "from": from_repo})
        url = f"{self.base}/v2/{repo}/blobs/uploads/?{query}"
        r = self.session.request("POST", url)
        if r.status == 201:
            return
        if r.status == 202 and r.header("location"):
            self.session.request("DELETE", urljoin(self.base + "/", r.header("location")))
        raise RegistryError(f"POST {_without_query(url)} (mount {digest} from {from_repo})", r, "not mounted")

    def put_manifest(self, repo: str, tag: str, body: bytes) -> None:
        """``PUT`` a manifest (JSON naming its ``mediaType``) under ``tag``."""
        url = self._url(repo, "manifest", tag)
        media_type = json.loads(body).get("mediaType", SCHEMA2)
        r = self.session.request("PUT", url, body=body, headers={"Content-Type": media_type})
        if r.status != 201:
            raise RegistryError(f"PUT {url}", r, "the manifest was not stored")

    def delete_manifest(self, repo: str, digest: str) -> str:
        """``DELETE`` a manifest by digest (every tag pointing at it goes with it): DELETED, GONE or REFUSED."""
        return self._delete("manifest", repo, digest)

    def delete_blob(self, repo: str, digest: str) -> str:
        """``DELETE`` a blob from ``repo``: DELETED, GONE or REFUSED.

        This unlinks the blob from the repository; the registry frees its bytes only at its garbage
        collection, and only when no repository links it any more.
        """
        return self._delete("blob", repo, digest)

    def _delete(self, kind: str, repo: str, digest: str) -> str:
        url = self._url(repo, kind, digest)
        r = self.session.request("DELETE", url, keep_body=True)
        if r.status in (200, 202, 204):
            return DELETED
        if r.status == 404:
            return GONE
        if r.status == 405 or "UNSUPPORTED" in error_codes(r.body):
            return REFUSED
        raise RegistryError(f"DELETE {url}", r, "not deleted")

    def tags(self, repo: str, page: int = 1000) -> list[str]:
        """Every tag of ``repo``, asked ``page`` at a time (the registry's next-page links followed); empty when
        the registry does not know the repository."""
        url: str | None = f"{self.base}/v2/{repo}/tags/list?n={page}"
        tags: list[str] = []
        asked: set[str] = set()
        while url and url not in asked:  # a next-page link back to a page already read ends the list
            asked.add(url)
            r = self.session.request("GET", url, keep_body=True)
            if r.status == 404:
                return tags
            if r.status != 200:
                raise RegistryError(f"GET {url}", r, "no tag list")
            try:
                tags += json.loads(r.body).get("tags") or []
            except (ValueError, AttributeError):
                raise RegistryError(f"GET {url}", r, "not a tag list") from None
            url = _next_page(self.base, r.header("link"))
        return tags

    def manifest(self, repo: str, ref: str) -> tuple[str, dict]:
        """(digest, parsed JSON) of the manifest ``ref`` (a tag or digest) of ``repo``, in any media type."""
        url = self._url(repo, "manifest", ref)
        r = self.session.request("GET", url, headers={"Accept": ACCEPT}, keep_body=True)
        if r.status != 200:
            raise RegistryError(f"GET {url}", r, "no manifest")
        try:
            doc = json.loads(r.body)
        except ValueError:
            raise RegistryError(f"GET {url}", r, "not a JSON manifest") from None
        digest = r.header("docker-content-digest") or "sha256:" + hashlib.sha256(r.body).hexdigest()
        return digest, doc if isinstance(doc, dict) else {}

    def size(self, kind: str, repo: str, ref: str, accept: str | None = None) -> int | None:
        """The ``Content-Length`` of a ``HEAD`` of a blob or manifest, or None when the registry has no answer."""
        r = self.session.request("HEAD", self._url(repo, kind, ref), headers={"Accept": accept} if accept else None)
        length = r.header("content-length")
        if r.status != 200 or length is None or not length.isdigit():
            return None
        return int(length)

    def stored_size(self, kind: str, repo: str, digest: str, accept: str | None = None) -> int | None:
        """The size of a blob or manifest the registry holds in ``repo`` (``HEAD``), None when it answers 404;
        RegistryError for any other answer (a refusal is not an absence)."""
        url = self._url(repo, kind, digest)
        r = self.session.request("HEAD", url, headers={"Accept": accept} if accept else None)
        if r.status == 404:
            return None
        length = r.header("content-length")
        if r.status != 200 or length is None or not length.isdigit():
            raise RegistryError(f"HEAD {url}", r, "no size")
        return int(length)

    def read(self, kind: str, repo: str, digest: str, sink: Callable[[bytes], None]) -> Response:
        """``GET`` a blob or manifest by digest, its body given to ``sink`` piece by piece as it arrives (a 200's
        only; never held whole), redirects to the registry's storage followed.

        Never raises for the registry's answer: the caller judges the :class:`Response` — its status (0 when no
        complete answer came, e.g. ``outcome`` "truncated": the body ended before its ``Content-Length``), its
        headers and ``nbytes``, the body bytes read."""
        url = self._url(repo, kind, digest)
        headers = {"Accept": ACCEPT} if kind == "manifest" else None
        try:
            return self.session.request("GET", url, headers=headers, stream=sink)
        except RequestError as e:
            return Response.failed(e)

    def pull_blob(self, repo: str, digest: str) -> bytes:
        """A blob's bytes, checked against ``digest`` (redirects to the registry's storage followed)."""
        url = self._url(repo, "blob", digest)
        r = self.session.request("GET", url, keep_body=True)
        if r.status != 200:
            raise RegistryError(f"GET {url}", r, "no blob")
        algorithm, _, expected = digest.partition(":")
        if algorithm != "sha256" or hashlib.sha256(r.body).hexdigest() != expected:
            raise RegistryError(f"GET {url}", r, "the bytes do not match the digest")
        return r.body


def error_codes(body: bytes) -> set[str]:
    """The ``code``s of a Distribution error body (``{"errors": [{"code": …}]}``); empty for anything else."""
    try:
        errors = json.loads(body).get("errors") or []
        return {e["code"] for e in errors if isinstance(e, dict) and isinstance(e.get("code"), str)}
    except (ValueError, AttributeError, TypeError):
        return set()


def _next_page(base: str, link: str | None) -> str | None:
    """The URL of the next page from a ``Link: </v2/…?last=…>; rel="next"`` header, or None."""
    if not link or 'rel="next"' not in link:
        return None
    target = link.partition("<")[2].partition(">")[0]
    return urljoin(base + "/", target) if target else None


def _without_query(url: str) -> str:
    """A URL for a message: upload locations carry state tokens in their query, which need not be printed."""
    return url.partition("?")[0]
