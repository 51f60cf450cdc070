"""The Distribution grammar of repository names and references.

Every name and reference that ends up in a registry URL is checked against
the grammar registries themselves enforce (distribution/reference): a name is
lowercase path components joined by ``/``, a reference is a tag or a digest.
A value outside it is never a registry request — at best the registry refuses
it, at worst (``..``, CR/LF, ``?``) it addresses another endpoint or injects a
header line — so the trace reader refuses such records and a client node
refuses such requests before anything is sent.

Trace references of layers are anonymized ids (hex strings), which the tag
grammar covers; uploads are addressed as ``uploads/<uuid>`` or ``uploads/``.

Registries and client nodes are addressed the same strict way: a registry by
``http(s)://host[:port]`` (or ``host:port``), a node by ``host:port`` — no
user, path, query or fragment, a port in 1..65535.
"""

from __future__ import annotations

import re

MAX_NAME = 255  # distribution/reference: NameTotalLengthMax

COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"  # one path component of a name
NAME = re.compile(rf"{COMPONENT}(?:/{COMPONENT})*")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")
UPLOAD = re.compile(r"uploads/(?:[A-Za-z0-9_=-][A-Za-z0-9_.=-]*)?")  # no leading dot: never "." or ".."


def name_error(name: str) -> str | None:
    """None when ``name`` is a valid repository name; otherwise what is wrong with it."""
    if not name:
        return "empty repository name"
    if len(name) > MAX_NAME:
        return f"repository name longer than {MAX_NAME} characters"
    if NAME.fullmatch(name) is None:
        return f"repository name {name[:80]!r} is not a Distribution name (lowercase a-z0-9 parts split by . _ - /)"
    return None


def reference_error(reference: str) -> str | None:
    """None when ``reference`` is a tag, a digest or an upload path; otherwise what is wrong with it."""
    if TAG.fullmatch(reference) or DIGEST.fullmatch(reference) or UPLOAD.fullmatch(reference):
        return None
    return f"reference {reference[:80]!r} is neither a tag, a digest nor an upload"


def is_digest(reference: str) -> bool:
    """Whether a manifest reference is a digest (``algorithm:hex``) rather than a tag."""
    return DIGEST.fullmatch(reference) is not None


def digest_error(digest: str) -> str | None:
    """None when ``digest`` is ``algorithm:hex``; otherwise what is wrong with it."""
    if DIGEST.fullmatch(digest):
        return None
    return f"digest {digest[:80]!r} is not algorithm:hex"


_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,253}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])"
HOST_PORT = re.compile(rf"{_HOST}:([0-9]{{1,5}})")
BASE_URL = re.compile(rf"https?://{_HOST}(?::([0-9]{{1,5}}))?")


def shown(address: str) -> str:
    """An address as a message may show it: never a ``user:password@`` part."""
    return address.rpartition("@")[2][:80]


def _port_error(port: str | None, address: str) -> str | None:
    if port is not None and not 1 <= int(port) <= 65_535:
        return f"{shown(address)!r}: port {port} is not 1..65535"
    return None


def base_url_error(base: str) -> str | None:
    """None when ``base`` is ``http(s)://host[:port]``; otherwise what is wrong with it."""
    m = BASE_URL.fullmatch(base)
    if m is None:
        return f"{shown(base)!r} is not http(s)://host[:port] (no user, path or query)"
    return _port_error(m.group(1), base)


def host_port_error(address: str) -> str | None:
    """None when ``address`` is ``host:port``; otherwise what is wrong with it."""
    m = HOST_PORT.fullmatch(address)
    if m is None:
        return f"{shown(address)!r} is not host:port"
    return _port_error(m.group(1), address)
