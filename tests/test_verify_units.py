"""The pure parts of ``drtp verify`` and of the warmup's image shapes (no registry)."""

from __future__ import annotations

import json

from drtp.master.commands.verify import named_by
from drtp.master.run.warmup import IMAGE_LAYERS, IMAGE_TAG_PREFIX, MANIFEST_LAYERS, image_shapes
from drtp.registry.manifest import CONFIG_DIGEST, build_manifest


def blob_entries(repo: str, n: int) -> dict:
    """``n`` warmed blobs of ``repo``, as a warmup's done map holds them."""
    return {("reg", repo, "blob", f"layer{i}"): {"digest": f"sha256:{i:064x}", "size": 100 + i} for i in range(n)}


def test_images_reference_every_blob_and_loose_only_the_first_three():
    done = blob_entries("a", 30) | blob_entries("b", 4)
    manifests = {("reg", "a", "v1"): 900, ("reg", "a", "v2"): 900}
    images = image_shapes(done, manifests, "images")
    named_a = {d for reg, repo, _, _, layers in images if repo == "a" for d, _ in layers}
    assert named_a == {e["digest"] for k, e in done.items() if k[1] == "a"}
    named_b = {d for reg, repo, _, _, layers in images if repo == "b" for d, _ in layers}
    assert len(named_b) == 4  # a repository without trace manifests gets images of its own
    trace_tags = [(tag, size, len(layers)) for _, repo, tag, size, layers in images if repo == "a" and size]
    assert trace_tags == [("v1", 900, MANIFEST_LAYERS), ("v2", 900, MANIFEST_LAYERS)]
    added = [layers for _, _, tag, size, layers in images if tag.startswith(IMAGE_TAG_PREFIX)]
    assert all(size == 0 for _, _, tag, size, _ in images if tag.startswith(IMAGE_TAG_PREFIX))
    assert max(len(layers) for layers in added) <= IMAGE_LAYERS
    # the same layers get the same tag: a resumed warmup finds the images it pushed
    assert image_shapes(done, manifests, "images") == images

    loose = image_shapes(done, manifests, "loose")
    assert [(repo, tag) for _, repo, tag, _, _ in loose] == [("a", "v1"), ("a", "v2")]
    assert all(layers == loose[0][4] and len(layers) == MANIFEST_LAYERS for *_, layers in loose)


def test_more_trace_manifests_than_groups_reuse_the_groups():
    done = blob_entries("a", 2)
    manifests = {("reg", "a", f"v{i}"): 500 for i in range(3)}
    shapes = image_shapes(done, manifests, "images")
    assert len(shapes) == 3 and all(len(layers) == 2 for *_, layers in shapes)


def test_named_by_reads_layers_config_and_an_index():
    body = build_manifest([("sha256:" + "1" * 64, 10), ("sha256:" + "2" * 64, 20)], 2000)
    assert named_by(body) == [("blob", CONFIG_DIGEST), ("blob", "sha256:" + "1" * 64), ("blob", "sha256:" + "2" * 64)]
    index = json.dumps({"manifests": [{"digest": "sha256:" + "3" * 64}, {"size": 1}]}).encode()
    assert named_by(index) == [("manifest", "sha256:" + "3" * 64)]
    assert named_by(b"not json") == [] and named_by(b"[1]") == []
