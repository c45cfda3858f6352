"""The lab's PKI: the cluster CA with the API server's serving cert, client certs and
kubeconfigs; and etcd's own CA (kubeadm's layout, `pki/etcd/`) for etcd's serving and peer
certs and the API server's etcd client cert. etcd trusts only its own CA, so no other lab
certificate (admin, kubelet, scheduler) is accepted by etcd: the API server is its only client.

Generated with `cryptography` (already a paramiko dependency) so no openssl shell-outs.
Keys and kubeconfigs are created 0600 in 0700 directories (see files.py); nothing here ever
leaves the lab's state directory.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from abtest.lab.files import PUBLIC_FILE, make_dir, write_file

VALID_DAYS = 365


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    write_file(path, pem)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    write_file(path, cert.public_bytes(serialization.Encoding.PEM), PUBLIC_FILE)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def ensure_ca(directory: Path, cn: str = "abtest-lab-ca") -> CertPair:
    pair = CertPair(directory / "ca.crt", directory / "ca.key")
    make_dir(directory)
    if pair.cert.exists() and pair.key.exists():
        return pair
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS * 5))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write_key(pair.key, key)
    _write_cert(pair.cert, cert)
    return pair


def issue(
    ca: CertPair,
    directory: Path,
    name: str,
    cn: str,
    org: str | None = None,
    server: bool = False,
    client: bool = False,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> CertPair:
    pair = CertPair(directory / f"{name}.crt", directory / f"{name}.key")
    make_dir(directory)
    if pair.cert.exists() and pair.key.exists():
        return pair
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, org))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if dns or ips:
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    _write_key(pair.key, key)
    _write_cert(pair.cert, cert)
    return pair


def ensure_service_account_key(directory: Path) -> Path:
    """The token signing key (sa.key) and its public half (sa.pub) for verification."""
    path = directory / "sa.key"
    make_dir(directory)
    if not path.exists():
        key = ec.generate_private_key(ec.SECP256R1())
        _write_key(path, key)
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        write_file(directory / "sa.pub", public, PUBLIC_FILE)
    return path


def write_kubeconfig(path: Path, server: str, ca: CertPair, client: CertPair, user: str) -> None:
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    write_file(
        path,
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: abtest-lab\n  cluster:\n    server: {server}\n"
        f"    certificate-authority-data: {b64(ca.cert)}\n"
        f"users:\n- name: {user}\n  user:\n"
        f"    client-certificate-data: {b64(client.cert)}\n"
        f"    client-key-data: {b64(client.key)}\n"
        f"contexts:\n- name: abtest-lab\n  context:\n    cluster: abtest-lab\n    user: {user}\n"
        "current-context: abtest-lab\n",
    )
