"""A per-simulator self-signed TLS certificate (ECDSA P-256), made with ``cryptography``.

kubectl (client-go ``clientcmd``) reads a kubeconfig's credentials only when the server
URL is ``https`` (``tools/clientcmd/client_config.go``: "only try to read the auth
information if we are secure"), so with authentication always on the simulator must speak
TLS for kubectl to authenticate at all. :func:`server_context` returns an ``SSLContext``
for a fresh self-signed certificate valid for the serving host, ``localhost`` and the
loopback addresses (and any extra names, e.g. a compose service name); the kubeconfig pins
it as ``certificate-authority-data``.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import tempfile
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _alt_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


_CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    crl_sign=False,
    encipher_only=False,
    decipher_only=False,
)


def self_signed(hosts: list[str], days: int = 3650) -> tuple[str, str]:
    """(certificate PEM, private key PEM) for ``hosts`` (DNS names or IP addresses)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "simcluster")])
    now = datetime.now(UTC)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_CA_KEY_USAGE, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.SubjectAlternativeName([_alt_name(h) for h in dict.fromkeys(hosts)]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    return cert_pem, key_pem


def server_context(host: str, extra_names: list[str] | None = None) -> tuple[ssl.SSLContext, str]:
    """A server ``SSLContext`` with a fresh certificate for ``host``, and that cert's PEM."""
    hosts = ["localhost", "127.0.0.1", "::1", *(extra_names or [])]
    if host and host not in ("0.0.0.0", "::"):  # wildcard binds are not names
        hosts.insert(0, host)
    cert_pem, key_pem = self_signed(hosts)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="simcluster-tls-") as tmp:
        cert_file, key_file = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        with open(cert_file, "w") as fh:
            fh.write(cert_pem)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(key_pem)
        ctx.load_cert_chain(cert_file, key_file)
    return ctx, cert_pem
