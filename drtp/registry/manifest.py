"""Real schema-2 image manifests for replayed pushes and for warmup.

A pushed image must be pullable: registries that refuse layers no manifest
references (ECR, for one) would otherwise refuse the replay's layer GETs.

A manifest references layers that exist in the repository; its config is the
first layer (as python-dxf does) or a tiny config blob, and it is padded with
an annotation to about the size the trace recorded, so a manifest GET moves
about the bytes the trace says.
"""

from __future__ import annotations

import hashlib
import json

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
# a minimal image config, pushed as a blob when a manifest has no layer to use as config
CONFIG_BLOB = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
CONFIG_DIGEST = "sha256:" + hashlib.sha256(CONFIG_BLOB).hexdigest()


def build_manifest(layers: list[tuple[str, int]], pad_to: int = 0) -> bytes:
    """A schema-2 manifest over ``layers`` ((digest, size) pairs), at least ``pad_to`` bytes long.

    With no layers, the config is :data:`CONFIG_BLOB`, which must exist in the repository.
    """
    config = layers[0] if layers else (CONFIG_DIGEST, len(CONFIG_BLOB))
    doc = {
        "schemaVersion": 2,
        "mediaType": SCHEMA2,
        "config": {"mediaType": CONFIG_TYPE, "size": config[1], "digest": config[0]},
        "layers": [{"mediaType": LAYER_TYPE, "size": s, "digest": d} for d, s in layers],
    }
    body = json.dumps(doc, separators=(",", ":")).encode()
    missing = pad_to - len(body) - len(',"annotations":{"drtp.padding":""}')
    if missing > 0:
        doc["annotations"] = {"drtp.padding": "x" * missing}
        body = json.dumps(doc, separators=(",", ":")).encode()
    return body


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def placeholder_digest(reference: str) -> str:
    """A digest no registry holds, for a trace reference never pushed (its read is expected to 404)."""
    return "sha256:" + hashlib.sha256(b"drtp-unknown:" + reference.encode()).hexdigest()
