"""drtp.registry.client against the real Distribution registry: each named call, checked from outside.

What the registry holds is read back with plain ``requests`` and its JSON log (the ground truth), not
with the client under test.
"""

from __future__ import annotations

import os

import pytest
import requests

from drtp.registry.client import REGISTRY_ERRORS, RegistryClient
from drtp.registry.local import LocalRegistry, free_port
from drtp.registry.manifest import ACCEPT, CONFIG_BLOB, CONFIG_DIGEST, SCHEMA2, build_manifest, digest_of
from drtp.replay.messages import RegistryAuth
from tests.realreg_support import PASSWORD, USER, write_htpasswd
from tests.registry_log import logged_requests

pytestmark = pytest.mark.registry


def test_push_mount_manifest_and_pull(registry):
    client = RegistryClient(registry.host)
    assert client.ping() == 200
    data = os.urandom(50_000)
    digest = digest_of(data)
    assert not client.exists("blob", "drtp/a", digest)

    client.push_blob("drtp/a", data, digest)
    head = requests.head(f"{registry.url}/v2/drtp/a/blobs/{digest}", timeout=5)
    assert head.status_code == 200 and int(head.headers["Content-Length"]) == len(data)
    assert client.exists("blob", "drtp/a", digest)

    offset = registry.log_path.stat().st_size
    client.mount_blob("drtp/b", "drtp/a", digest)
    sent = logged_requests(registry.log_path, offset)
    assert [(x.method, x.path, x.status) for x in sent] == [("POST", "/v2/drtp/b/blobs/uploads/", 201)]
    assert requests.head(f"{registry.url}/v2/drtp/b/blobs/{digest}", timeout=5).status_code == 200

    client.push_blob("drtp/b", CONFIG_BLOB, CONFIG_DIGEST)  # the manifest's config
    body = build_manifest([(digest, len(data))], 2000)
    client.put_manifest("drtp/b", "v1", body)
    r = requests.get(f"{registry.url}/v2/drtp/b/manifests/v1", headers={"Accept": ACCEPT}, timeout=5)
    assert r.status_code == 200 and r.headers["Content-Type"] == SCHEMA2 and r.content == body
    assert client.exists("manifest", "drtp/b", digest_of(body))
    assert not client.exists("manifest", "drtp/a", digest_of(body))

    assert client.pull_blob("drtp/b", digest) == data


def test_a_registry_that_does_not_answer_raises_what_registry_errors_names():
    client = RegistryClient(f"127.0.0.1:{free_port()}", timeout=2)
    data = b"x" * 10
    with pytest.raises(REGISTRY_ERRORS):
        client.ping()
    with pytest.raises(REGISTRY_ERRORS):
        client.push_blob("drtp/a", data, digest_of(data))
    assert not client.exists("blob", "drtp/a", digest_of(data))


def test_basic_auth_credentials_are_sent_and_checked(tmp_path):
    with LocalRegistry(tmp_path / "reg", htpasswd=write_htpasswd(tmp_path / "htpasswd")) as reg:
        assert RegistryClient(reg.url).ping() == 401  # anonymous: asked for credentials
        data = os.urandom(1000)
        digest = digest_of(data)

        wrong = RegistryClient(reg.url, RegistryAuth(reg.url, USER, "not-the-password", insecure=True))
        with pytest.raises(REGISTRY_ERRORS):
            wrong.push_blob("drtp/a", data, digest)

        good = RegistryClient(reg.url, RegistryAuth(reg.url, USER, PASSWORD, insecure=True))
        good.push_blob("drtp/a", data, digest)
        assert good.exists("blob", "drtp/a", digest)
        head = requests.head(f"{reg.url}/v2/drtp/a/blobs/{digest}", auth=(USER, PASSWORD), timeout=5)
        assert head.status_code == 200 and int(head.headers["Content-Length"]) == len(data)
