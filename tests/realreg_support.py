"""Fixtures for real-registry tests: a test CA and server certificate, an htpasswd file, and a
Docker token server (https, Bottle) issuing RS256 JWTs the Distribution registry's ``auth: token`` trusts.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import ssl
import threading
import time
import uuid
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import bcrypt
import bottle
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from drtp.registry.local import free_port

USER, PASSWORD = "alice", "correct-horse-battery"
SERVICE, ISSUER = "drtp-registry", "drtp-test-issuer"


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(key, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _cert(subject: str, key, issuer_name: x509.Name, issuer_key, ca: bool, ip: str | None = None):
    now = dt.datetime.now(dt.timezone.utc)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ip:
        b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


class Pki:
    """A test CA (ca.pem) and a certificate for 127.0.0.1 signed by it (server.pem, server.key)."""

    def __init__(self, d: Path) -> None:
        d.mkdir(parents=True, exist_ok=True)
        ca_key, key = _key(), _key()
        ca = _cert("drtp test CA", ca_key, _name("drtp test CA"), ca_key, ca=True)
        server = _cert("127.0.0.1", key, ca.subject, ca_key, ca=False, ip="127.0.0.1")
        self.ca = d / "ca.pem"
        self.cert = d / "server.pem"
        self.key = d / "server.key"
        self.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        self.cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
        _write_key(key, self.key)


def write_htpasswd(path: Path, user: str = USER, password: str = PASSWORD) -> Path:
    path.write_text(f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()}\n")
    return path


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """Docker token server over https: GET /token?service=&scope= with basic auth → {"token": JWT}."""

    def __init__(self, d: Path, pki: Pki, user: str = USER, password: str = PASSWORD, expires_in: int = 300) -> None:
        self.signing_key = _key()
        signer = _cert("drtp token signer", self.signing_key, _name("drtp token signer"), self.signing_key, ca=True)
        self.bundle = d / "token-signer.pem"
        self.bundle.write_bytes(signer.public_bytes(serialization.Encoding.PEM))
        self.x5c = base64.b64encode(signer.public_bytes(serialization.Encoding.DER)).decode()
        self.user, self.password = user, password
        self.issued = 0
        self.refused = 0  # token requests refused for their credentials
        self.scopes: list[str] = []  # the scope asked for, per token issued
        self.hold: threading.Event | None = None  # when given, each token request waits until it is set ...
        self.holding = threading.Event()  # ... and this is set once one does
        self.expires_in = expires_in  # the tokens' life in seconds (the JWT's exp and the answer's expires_in)
        self.port = free_port()
        app = bottle.Bottle()
        app.route("/token", "GET", self.token)
        self.server = make_server("127.0.0.1", self.port, app, handler_class=_Quiet)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(pki.cert, pki.key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def registry_config(self) -> dict:
        return {
            "realm": f"https://127.0.0.1:{self.port}/token",
            "service": SERVICE,
            "issuer": ISSUER,
            "rootcertbundle": str(self.bundle),
        }

    def token(self):
        if self.hold is not None:
            self.holding.set()
            self.hold.wait(60)
        auth = bottle.request.auth
        if auth != (self.user, self.password):
            self.refused += 1
            bottle.response.status = 401
            return {"errors": [{"code": "UNAUTHORIZED"}]}
        access = []
        for scope in bottle.request.query.getall("scope"):
            typ, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": typ, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "sub": self.user,
            "aud": bottle.request.query.get("service") or SERVICE,
            "exp": now + self.expires_in,
            "nbf": now - 10,
            "iat": now,
            "jti": uuid.uuid4().hex,
            "access": access,
        }
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        signing_input = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(claims).encode())
        sig = self.signing_key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        self.issued += 1
        self.scopes.append(" ".join(bottle.request.query.getall("scope")))
        return {"token": signing_input + "." + _b64(sig), "expires_in": self.expires_in}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Quiet(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002
        pass
