"""A private certificate authority and certificates made at test time (with ``trustme``).

``server`` is valid for 127.0.0.1 and localhost; ``wrong_host`` is valid only for
``wrong.example`` (a client that checks hostnames must refuse it on 127.0.0.1);
``client`` is a client certificate from the same CA. Nothing is trusted system-wide.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["WRONG_HOSTNAME", "CertPair", "TlsMaterial", "make_tls_material"]

WRONG_HOSTNAME = "wrong.example"


@dataclass(frozen=True)
class CertPair:
    """A PEM certificate chain file and its PEM private key file."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class TlsMaterial:
    """The CA file clients trust and the certificates it issued."""

    ca: Path
    server: CertPair
    wrong_host: CertPair
    client: CertPair


def make_tls_material(directory: Path) -> TlsMaterial:
    """Write a fresh CA and its certificates into ``directory`` (about 10 ms)."""
    import trustme  # the `test` extra; only TLS tests need it

    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="sharedos-redis test CA")
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))

    def issue(name: str, *identities: str) -> CertPair:
        leaf = ca.issue_cert(*identities, common_name=identities[0])
        pair = CertPair(directory / f"{name}.pem", directory / f"{name}.key")
        pair.cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        leaf.private_key_pem.write_to_path(str(pair.key))
        return pair

    return TlsMaterial(ca=directory / "ca.pem",
                       server=issue("server", "127.0.0.1", "localhost"),
                       wrong_host=issue("wrong-host", WRONG_HOSTNAME),
                       client=issue("client", "client.example"))
