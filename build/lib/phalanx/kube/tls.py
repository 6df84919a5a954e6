"""The webhook's TLS material: a private CA, a serving certificate it signs, and when each must be renewed.

The API server only needs the CA bundle in the webhook configuration, so a
private CA is enough; no cert-manager is required. Every replica serves the
same certificate (kept in one Secret by `servingcert`), or the one the user
mounts. Pure functions of their inputs and the time they are given.

Renewal: the serving certificate is reissued once less than a third of its
validity remains; the CA is replaced once it would expire before a freshly
issued serving certificate does. A replaced CA stays in the bundle next to
its successor until it expires, so a replica still serving a certificate it
signed keeps being trusted.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CA_VALIDITY = datetime.timedelta(days=5 * 365)
SERVING_VALIDITY = datetime.timedelta(days=90)
BACKDATE = datetime.timedelta(minutes=5)
CA_NAME = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "phalanx-webhook-ca")])


@dataclass(frozen=True)
class ServingCert:
    ca_pem: bytes
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class Material:
    """What the Secret holds: the CA bundle (current CA first), the current CA's key, the serving pair."""

    ca_bundle: bytes
    ca_key: bytes
    cert: bytes
    key: bytes


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _new_ca(now: datetime.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(CA_NAME)
        .issuer_name(CA_NAME)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return ca, key


def _issue(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, hosts: list[str], now: datetime.datetime) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + SERVING_VALIDITY, ca.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def fresh(hosts: list[str], now: datetime.datetime) -> Material:
    """A new CA and a serving certificate for `hosts` (DNS names or IPs)."""
    ca, ca_key = _new_ca(now)
    cert, key = _issue(ca, ca_key, hosts, now)
    return Material(ca.public_bytes(serialization.Encoding.PEM), _key_pem(ca_key), cert, key)


def _certs(bundle: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(bundle) if bundle.strip() else []


def _lifetime_left(cert: x509.Certificate, now: datetime.datetime) -> float:
    """The fraction of its validity a certificate has left (negative once expired)."""
    total = (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds()
    return (cert.not_valid_after_utc - now).total_seconds() / total


def renewed(material: Material, hosts: list[str], now: datetime.datetime) -> Material | None:
    """The material to switch to, or None while `material` is good for `hosts` at `now`."""
    ca, *older = _certs(material.ca_bundle)
    ca_key = serialization.load_pem_private_key(material.ca_key, None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey), "the CA key is the EC key this module generates"
    if ca.not_valid_after_utc < now + SERVING_VALIDITY:
        new_ca, ca_key = _new_ca(now)
        bundle = [new_ca, *(c for c in (ca, *older) if c.not_valid_after_utc > now)]
        cert, key = _issue(new_ca, ca_key, hosts, now)
        return Material(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in bundle), _key_pem(ca_key), cert, key)
    serving = x509.load_pem_x509_certificate(material.cert)
    try:
        names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        covered = {str(n) for n in names.get_values_for_type(x509.DNSName)} | {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    except x509.ExtensionNotFound:
        covered = set()
    normalised = {str(ipaddress.ip_address(h)) if _is_ip(h) else h for h in hosts}
    if _lifetime_left(serving, now) > 1 / 3 and normalised <= covered and serving.issuer == ca.subject:
        current = [c for c in older if c.not_valid_after_utc > now]
        if len(current) == len(older):
            return None
        bundle = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (ca, *current))
        return Material(bundle, material.ca_key, material.cert, material.key)  # an expired CA leaves the bundle
    cert, key = _issue(ca, ca_key, hosts, now)
    return Material(material.ca_bundle, material.ca_key, cert, key)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def write(directory: Path, material: Material) -> ServingCert:
    """The serving pair and the CA bundle as files (the layout of a cert-manager Secret), for the TLS server to load."""
    directory.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    key_file.touch(mode=0o600)
    key_file.write_bytes(material.key)
    cert_file.write_bytes(material.cert)
    (directory / "ca.crt").write_bytes(material.ca_bundle)
    return ServingCert(ca_pem=material.ca_bundle, cert_file=cert_file, key_file=key_file)


def generate(directory: Path, hosts: list[str]) -> ServingCert:
    """A fresh CA and a certificate for `hosts`, written under `directory`."""
    return write(directory, fresh(hosts, datetime.datetime.now(datetime.UTC)))


def load(directory: Path) -> ServingCert:
    """User-supplied files: tls.crt, tls.key and ca.crt (the layout of a cert-manager Secret)."""
    return ServingCert(ca_pem=(directory / "ca.crt").read_bytes(), cert_file=directory / "tls.crt", key_file=directory / "tls.key")
