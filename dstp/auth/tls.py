"""TLS material for the control plane: load a certificate and key, or make a self-signed one for development.

    load_tls(cert_path, key_path)      -> TlsMaterial (PEM bytes, paths, SHA-256 fingerprint)
    self_signed(folder, names)         -> TlsMaterial, generated with ``cryptography`` on first use
                                          (ECDSA P-256, 90 days) and reused while it covers ``names``

gRPC (``grpc.ssl_server_credentials``) and HTTP (uvicorn's ssl) take the same
files. A client trusts a self-signed server with ``ca_file=`` the certificate
(``dstp.connect(addr, tls=True, ca_file=…)``, ``dstp --ca-file``), and checks
the printed fingerprint against the file it was given.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["TlsMaterial", "default_names", "fingerprint", "load_tls", "self_signed"]

#: Days a self-signed certificate is valid; one with less than a day left is replaced.
SELF_SIGNED_DAYS = 90


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """A certificate (chain) and its private key, as PEM, where they are, and the leaf's fingerprint."""

    cert_pem: bytes
    key_pem: bytes
    cert_path: Path
    key_path: Path
    fingerprint: str


def fingerprint(cert_pem: bytes) -> str:
    """Return the SHA-256 fingerprint of the first certificate in ``cert_pem``: ``AB:CD:…``."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.fingerprint(hashes.SHA256()).hex(":").upper()


def load_tls(cert_path: Path, key_path: Path) -> TlsMaterial:
    """Return the PEM certificate and key at these paths; ValueError saying what is wrong with them."""
    try:
        cert_pem, key_pem = Path(cert_path).read_bytes(), Path(key_path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the TLS certificate or key: {exc.strerror}: {exc.filename}") from exc
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{cert_path} / {key_path}: not a PEM certificate and unencrypted PEM key ({exc})") from exc
    if cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) \
            != key.public_key().public_bytes(serialization.Encoding.DER,
                                             serialization.PublicFormat.SubjectPublicKeyInfo):
        raise ValueError(f"the key {key_path} does not belong to the certificate {cert_path}")
    return TlsMaterial(cert_pem, key_pem, Path(cert_path), Path(key_path), fingerprint(cert_pem))


def default_names(host: str) -> list[str]:
    """Return the names a development certificate for a server listening on ``host`` covers."""
    names = ["localhost", "127.0.0.1", "::1"]
    if host not in ("", "0.0.0.0", "::"):
        names.append(host)
    else:
        names.append(socket.gethostname())
    return list(dict.fromkeys(names))


def _san(names: Iterable[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def _covers(cert: x509.Certificate, names: Iterable[str], now: datetime.datetime) -> bool:
    if cert.not_valid_after_utc - now < datetime.timedelta(days=1):
        return False
    try:
        have = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        return False
    return set(_san(names)) <= have


def self_signed(folder: Path, names: Iterable[str]) -> TlsMaterial:
    """Return a self-signed certificate for ``names`` kept in ``folder``, making a new one when needed."""
    names = list(names)
    folder = Path(folder)
    cert_path, key_path = folder / "dstp-dev-cert.pem", folder / "dstp-dev-key.pem"
    now = datetime.datetime.now(datetime.timezone.utc)
    if cert_path.exists() and key_path.exists():
        try:
            material = load_tls(cert_path, key_path)
            if _covers(x509.load_pem_x509_certificate(material.cert_pem), names, now):
                return material
        except ValueError:
            pass  # damaged: make a new one
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dstp development server"),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dstp (self-signed)")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName(_san(names)), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key_pem)
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_path.write_bytes(cert_pem)
    return TlsMaterial(cert_pem, key_pem, cert_path, key_path, fingerprint(cert_pem))
