"""The certificates and keys a local control plane needs, made with ``cryptography``.

One CA signs everything: the kube-apiserver's serving certificate, the admin's client
certificate (``O=system:masters``, as kubeadm's ``admin.conf``), one client certificate per
control-plane component (kube-controller-manager, kube-scheduler: their RBAC users
``system:kube-controller-manager`` and ``system:kube-scheduler`` from the bootstrap policy) and
the serving certificate of Kueue's webhooks on loopback. A second CA, the front proxy's (as
kubeadm's ``front-proxy-ca``), signs only the client certificate the API server's aggregator
presents to extension API servers (Kueue's visibility server): they trust the user it names
in ``X-Remote-User`` because that CA signed the caller. The ServiceAccount signing key is an
RSA key, as ``--service-account-signing-key-file`` expects.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name: str, organization: str = "") -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _alt(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass
class Pair:
    cert: Path
    key: Path


class CertificateAuthority:
    """A CA written to ``directory`` (ca.crt, ca.key) that issues leaf pairs next to it."""

    def __init__(self, directory: Path, days: int = 3650, name: str = "gpu-portal-local-ca"):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.days = days
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        name = _name(name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(days=days))
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
            .sign(self._key, hashes.SHA256())
        )
        self.cert_path = self.dir / "ca.crt"
        self.cert_path.write_bytes(self.pem)
        (self.dir / "ca.key").write_bytes(_pem_key(self._key))

    @property
    def pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        stem: str,
        common_name: str,
        *,
        organization: str = "",
        hosts: tuple[str, ...] = (),
        client: bool = False,
    ) -> Pair:
        """A leaf certificate (``stem``.crt/.key): serving for ``hosts``, or a client's."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(days=self.days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if hosts:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_alt(h) for h in hosts]), critical=False
            )
        cert = builder.sign(self._key, hashes.SHA256())
        pair = Pair(self.dir / f"{stem}.crt", self.dir / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(_pem_key(key))
        pair.key.chmod(0o600)
        return pair


def service_account_keys(directory: Path) -> tuple[Path, Path]:
    """(private key, public key) PEM files for signing and verifying ServiceAccount tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private, public = directory / "sa.key", directory / "sa.pub"
    private.write_bytes(_pem_key(key))
    private.chmod(0o600)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public
