"""Small real container images in skopeo's ``dir:`` layout, built by the tests."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(files: dict[str, bytes]) -> tuple[bytes, str]:
    """A gzipped tar layer and the digest of its uncompressed tar (the diff_id)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(content))
    tar_bytes = raw.getvalue()
    return gzip.compress(tar_bytes, mtime=0), _sha(tar_bytes)


def build_image(path: Path, layers: list[dict[str, bytes]]) -> dict:
    """Write a schema-2 image with the given layers (file name -> content) as a ``dir:`` layout.

    Returns {"manifest": digest, "config": digest, "layers": [digests], "sizes": [bytes]}.
    """
    path.mkdir(parents=True, exist_ok=True)
    (path / "version").write_text("Directory Transport Version: 1.1\n")
    blobs, diff_ids = [], []
    for files in layers:
        blob, diff_id = _layer(files)
        blobs.append(blob)
        diff_ids.append(diff_id)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
    ).encode()
    for blob in [*blobs, config]:
        (path / _sha(blob).split(":")[1]).write_bytes(blob)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": _sha(config),
            },
            "layers": [
                {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": len(b), "digest": _sha(b)}
                for b in blobs
            ],
        },
        indent=3,
    ).encode()
    (path / "manifest.json").write_bytes(manifest)
    return {
        "manifest": _sha(manifest),
        "config": _sha(config),
        "layers": [_sha(b) for b in blobs],
        "sizes": [len(b) for b in blobs],
    }


def random_files(n: int, size: int, seed: int) -> dict[str, bytes]:
    rnd = __import__("random").Random(seed)
    return {f"data/file{seed}-{i}.bin": rnd.randbytes(size) for i in range(n)}


def skopeo(*args: str) -> None:
    """Run skopeo (plain-HTTP registries: pass the ``--*-tls-verify=false`` flags); fail with its stderr."""
    import subprocess

    out = subprocess.run(["skopeo", *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr


def copy_between_repositories(base: Path, host: str, source: str, target: str) -> dict:
    """Real traffic with cross-repository mounts: an image pushed to ``source``, copied registry-side
    to ``target`` (skopeo mounts the layers it knows ``source`` holds) and pulled from ``target``."""
    image = build_image(base / "img", [random_files(2, 20_000, seed=11), random_files(1, 30_000, seed=12)])
    registry = f"docker://{host}"
    skopeo("copy", "--dest-tls-verify=false", f"dir:{base / 'img'}", f"{registry}/{source}:v1")
    skopeo(
        "copy",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        f"{registry}/{source}:v1",
        f"{registry}/{target}:v1",
    )
    skopeo("copy", "--src-tls-verify=false", f"{registry}/{target}:v1", f"dir:{base / 'pulled'}")
    return image


def open_uploads(storage: Path) -> list[Path]:
    """Upload sessions a Distribution registry still holds under its storage root: the ``_uploads/<id>``
    folders with a ``startedat`` or ``data`` file.  A completed upload's folder is gone; a cancelled one
    (DELETE) keeps only its hash states, which the registry no longer serves (404)."""
    return [
        entry
        for folder in storage.rglob("_uploads")
        for entry in folder.iterdir()
        if (entry / "startedat").exists() or (entry / "data").exists()
    ]


__all__ = ["build_image", "copy_between_repositories", "open_uploads", "random_files", "skopeo", "os"]
