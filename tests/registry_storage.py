"""A real Distribution registry's storage read from disk: the ground truth of what is in it.

A tag is ``<repository>/_manifests/tags/<tag>/current/link``, a blob in a repository is
``<repository>/_layers/sha256/<hex>/link`` (docker/distribution's filesystem driver layout).
"""

from __future__ import annotations

from pathlib import Path

from drtp.registry.local import LocalRegistry


def storage_of(reg: LocalRegistry) -> Path:
    return reg.workdir / "storage" / "docker" / "registry" / "v2" / "repositories"


def layer_links(reg: LocalRegistry) -> set[tuple[str, str]]:
    """(repository, blob digest) of every blob link in the registry's storage."""
    root = storage_of(reg)
    return {
        (str(link.parent.parent.parent.parent.relative_to(root)), "sha256:" + link.parent.name)
        for link in root.rglob("_layers/sha256/*/link")
    }


def tag_dirs(reg: LocalRegistry) -> set[tuple[str, str]]:
    """(repository, tag) of every tag in the registry's storage."""
    root = storage_of(reg)
    return {
        (str(t.parent.parent.parent.relative_to(root)), t.name)
        for t in root.rglob("_manifests/tags/*")
        if (t / "current" / "link").exists()
    }


def every_file(reg: LocalRegistry) -> set[Path]:
    return {p for p in storage_of(reg).rglob("*") if p.is_file()}
