"""drtp.registry.calls against the real Distribution registry: each named call, checked from outside.

What the registry holds is read back with plain ``requests``, python-dxf (an independent registry client with
its own TLS and auth) and the registry's JSON log (the ground truth), not with the code under test.
"""

from __future__ import annotations

import os

import pytest
import requests
from dxf import DXF

from drtp.registry.calls import REGISTRY_ERRORS, RegistryCalls, RegistryError
from drtp.registry.local import LocalRegistry, free_port
from drtp.registry.manifest import ACCEPT, CONFIG_BLOB, CONFIG_DIGEST, SCHEMA2, build_manifest, digest_of
from drtp.replay.messages import RegistryAuth
from tests.realreg_support import PASSWORD, USER, Pki, write_htpasswd
from tests.registry_log import logged_requests

pytestmark = pytest.mark.registry


def test_push_mount_manifest_and_pull(registry):
    client = RegistryCalls(registry.host)
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
    client = RegistryCalls(f"127.0.0.1:{free_port()}", timeout=2)
    data = b"x" * 10
    with pytest.raises(REGISTRY_ERRORS):
        client.ping()
    with pytest.raises(REGISTRY_ERRORS):
        client.push_blob("drtp/a", data, digest_of(data))
    assert not client.exists("blob", "drtp/a", digest_of(data))


def test_basic_auth_credentials_are_sent_and_checked(tmp_path):
    with LocalRegistry(tmp_path / "reg", htpasswd=write_htpasswd(tmp_path / "htpasswd")) as reg:
        assert RegistryCalls(reg.url).ping() == 401  # anonymous: asked for credentials
        data = os.urandom(1000)
        digest = digest_of(data)

        wrong = RegistryCalls(reg.url, RegistryAuth(reg.url, USER, "not-the-password", insecure=True))
        with pytest.raises(REGISTRY_ERRORS):
            wrong.push_blob("drtp/a", data, digest)

        good = RegistryCalls(reg.url, RegistryAuth(reg.url, USER, PASSWORD, insecure=True))
        good.push_blob("drtp/a", data, digest)
        assert good.exists("blob", "drtp/a", digest)
        head = requests.head(f"{reg.url}/v2/drtp/a/blobs/{digest}", auth=(USER, PASSWORD), timeout=5)
        assert head.status_code == 200 and int(head.headers["Content-Length"]) == len(data)


def test_python_dxf_reads_what_drtp_pushed_over_tls_with_basic_auth(tmp_path):
    """An independent client (python-dxf, its own TLS and auth) is the witness of a streamed push."""
    pki = Pki(tmp_path / "pki")
    htpasswd = write_htpasswd(tmp_path / "htpasswd")
    with LocalRegistry(tmp_path / "reg", tls=(pki.cert, pki.key), htpasswd=htpasswd) as reg:
        auth = RegistryAuth(reg.url, USER, PASSWORD, ca_pem=pki.ca.read_text())
        client = RegistryCalls(reg.url, auth)
        assert client.ping() == 401  # anonymous GET /v2/: the registry asks for credentials
        parts = [os.urandom(70_000), os.urandom(130_000)]
        data = b"".join(parts)
        digest = digest_of(data)
        client.push_blob("drtp/tls", iter(parts), digest, size=len(data))  # a stream of chunks, not one body
        witness = DXF(reg.host, "drtp/tls", auth=lambda dxf, response: dxf.authenticate(USER, PASSWORD, response),
                      tlsverify=str(pki.ca))  # fmt: skip
        assert b"".join(witness.pull_blob(digest)) == data
        assert client.size("blob", "drtp/tls", digest) == len(data)
        with pytest.raises(RegistryError, match="HTTP 404"):
            client.pull_blob("drtp/tls", digest_of(b"never pushed"))


def test_a_refused_mount_cancels_the_upload_it_opened(registry):
    """A mount of a blob the source does not hold: the registry opens an upload instead (202); the client
    cancels it (DELETE) and raises, so warmup pushes the blob."""
    client = RegistryCalls(registry.host)
    offset = registry.log_path.stat().st_size
    with pytest.raises(RegistryError, match="not mounted"):
        client.mount_blob("drtp/c", "drtp/nowhere", digest_of(b"not there"))
    sent = [(x.method, x.status) for x in logged_requests(registry.log_path, offset)]
    assert sent == [("POST", 202), ("DELETE", 204)]
