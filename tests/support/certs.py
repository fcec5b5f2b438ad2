"""Test certificates made with ``cryptography``: a self-signed CA and certificates it signs.

One maker for every test that needs a private CA (a package index behind one, a Kubernetes
CA handed to Vault, a CA bundle the runtime must read), so they differ only in their names.
"""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Key = ec.EllipticCurvePrivateKey


def certificate_builder(subject: str, key: Key, issuer: str) -> x509.CertificateBuilder:
    """A certificate for ``subject``'s ``key``, issued by ``issuer``, valid for a day."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def self_signed_ca(name: str) -> tuple[x509.Certificate, Key]:
    """A CA named ``name`` that may sign server certificates (not other CAs), and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        certificate_builder(name, key, name)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    return ca, key


def pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)
