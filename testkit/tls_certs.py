"""Throw-away certificates for TLS tests: a CA, and server or client certificates it signs.

Made with the ``cryptography`` package (Scrapy depends on it), EC P-256, valid for a day,
written as PEM files into a directory the caller owns. A server certificate names
``localhost`` and ``127.0.0.1``, so a client that checks host names accepts it there.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertFiles", "make_ca", "issue"]

_VALID = datetime.timedelta(days=1)


@dataclass(frozen=True)
class CertFiles:
    """A certificate and its key, as PEM files; ``ca``: the CA certificate that signed it."""

    cert: Path
    key: Path
    ca: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write(directory: Path, stem: str, cert: x509.Certificate,
           key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


def _builder(subject: str, issuer: x509.Name,
             key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + _VALID))


def make_ca(directory: Path, name: str = "ca") -> CertFiles:
    """A self-signed CA in ``directory`` (``NAME.crt``, ``NAME.key``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(f"clustersync test {name}", _name(f"clustersync test {name}"), key)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = _write(directory, name, cert, key)
    return CertFiles(cert_path, key_path, cert_path)


def issue(ca: CertFiles, directory: Path, name: str) -> CertFiles:
    """A certificate signed by ``ca`` for both ends of a connection (server and client
    authentication), naming localhost and 127.0.0.1."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    alt_names = x509.SubjectAlternativeName([
        x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (_builder(name, ca_cert.subject, key)
            .add_extension(alt_names, critical=False)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_path, key_path = _write(directory, name, cert, key)
    return CertFiles(cert_path, key_path, ca.cert)
