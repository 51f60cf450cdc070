"""Real schema-2 image manifests for replayed pushes and for warmup.

A pushed image must be pullable: registries that refuse layers no manifest
references (ECR, for one) would otherwise refuse the replay's layer GETs.

A manifest references layers that exist in the repository and an image config
blob: the image's own (a replayed push names the config blob the trace pushed
with the image), else the minimal :data:`CONFIG_BLOB`.  It is padded to exactly
the size the trace recorded, so a manifest PUT or GET moves the bytes the trace
says: a gap of :data:`ANNOTATION_OVERHEAD` bytes or more becomes an annotation,
a smaller one whitespace after the opening brace (valid JSON; the registry keeps
the bytes as sent and digests them so).  A manifest cannot be smaller than its
unpadded form (:func:`build_manifest` without ``pad_to``): a trace size below
that is sent at the unpadded size, and the run counts it.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache

SCHEMA2 = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar.gzip"
ACCEPT = ", ".join(
    (
        SCHEMA2,
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    )
)
# a minimal image config, pushed as a blob when a manifest has no config of its own
CONFIG_BLOB = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
CONFIG_DIGEST = "sha256:" + hashlib.sha256(CONFIG_BLOB).hexdigest()
PADDING_KEY = "drtp.padding"
# bytes an empty padding annotation adds to a compact manifest: ,"annotations":{"drtp.padding":""}
ANNOTATION_OVERHEAD = len(',"annotations":{"' + PADDING_KEY + '":""}')


def build_manifest(layers: list[tuple[str, int]], pad_to: int = 0, config: tuple[str, int] | None = None) -> bytes:
    """A schema-2 manifest over ``layers`` ((digest, size) pairs) and ``config`` ((digest, size)).

    Exactly ``pad_to`` bytes long when that is at least its unpadded size, else the unpadded size.
    With no ``config``, the config is :data:`CONFIG_BLOB`, which must exist in the repository.
    """
    config_digest, config_size = config if config is not None else (CONFIG_DIGEST, len(CONFIG_BLOB))
    doc = {
        "schemaVersion": 2,
        "mediaType": SCHEMA2,
        "config": {"mediaType": CONFIG_TYPE, "size": config_size, "digest": config_digest},
        "layers": [{"mediaType": LAYER_TYPE, "size": s, "digest": d} for d, s in layers],
    }
    body = json.dumps(doc, separators=(",", ":")).encode()
    gap = pad_to - len(body)
    if gap <= 0:
        return body
    if gap < ANNOTATION_OVERHEAD:
        return b"{" + b" " * gap + body[1:]
    doc["annotations"] = {PADDING_KEY: "x" * (gap - ANNOTATION_OVERHEAD)}
    return json.dumps(doc, separators=(",", ":")).encode()


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@lru_cache(maxsize=1 << 14)
def placeholder_digest(reference: str) -> str:
    """A digest no registry holds, for a trace reference never pushed (its read is expected to 404).
    Cached: the master asks for it once per read of an unknown object, and popular objects repeat."""
    return "sha256:" + hashlib.sha256(b"drtp-unknown:" + reference.encode()).hexdigest()
