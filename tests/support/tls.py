"""Certificates made in the test: a CA, a server certificate for 127.0.0.1, a client one."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    cert: bytes
    key: bytes


@dataclass(frozen=True)
class TestPKI:
    ca: bytes
    server: Pair
    client: Pair
    stranger: Pair  # signed by another CA: must be refused


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(common_name))
            .issuer_name(_name(common_name)).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, common_name: str,
          usage: x509.ObjectIdentifier) -> Pair:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(common_name))
               .issuer_name(ca.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
               .add_extension(x509.SubjectAlternativeName(
                   [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                   critical=False))
    cert = builder.sign(ca_key, hashes.SHA256())
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def make_pki() -> TestPKI:
    ca, ca_key = _ca("fleetcache-test-ca")
    other, other_key = _ca("someone-else")
    return TestPKI(
        ca=ca.public_bytes(serialization.Encoding.PEM),
        server=_leaf(ca, ca_key, "function-fleetcache", ExtendedKeyUsageOID.SERVER_AUTH),
        client=_leaf(ca, ca_key, "crossplane", ExtendedKeyUsageOID.CLIENT_AUTH),
        stranger=_leaf(other, other_key, "stranger", ExtendedKeyUsageOID.CLIENT_AUTH),
    )
