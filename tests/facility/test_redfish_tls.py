"""TLS to a BMC: verified by default, a private CA can be named, verification can be turned off."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agents.facility.config import parse_target
from agents.facility.redfish_collector import RedfishCollector
from fleetsim.peers.redfish_server import RedfishServer, RedfishTree
from tests.support.facility import MOCKUPS, NOW


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, the kind a BMC ships with."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bmc.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "bmc.pem", folder / "bmc.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def https_pdu(tmp_path: Path) -> Iterator[tuple[RedfishServer, Path]]:
    cert, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = RedfishServer(RedfishTree.from_mockup(MOCKUPS["pdu"]), tls=context).start()
    yield server, cert
    server.stop()


def pdu_collector(url: str, **extra: object) -> RedfishCollector:
    table = {"name": "pdu", "protocol": "redfish", "address": url, "profile": "pdu"}
    return RedfishCollector(parse_target({**table, "feeds": "feed:A1/A", **extra}))


def test_a_self_signed_bmc_is_refused_by_default(https_pdu):
    server, _ = https_pdu
    collector = pdu_collector(server.url)

    collector.collect(NOW)

    assert collector.status.state == "unreachable"
    assert "CERTIFICATE_VERIFY_FAILED" in collector.status.detail


def test_naming_the_bmc_certificate_as_ca_file_makes_it_trusted(https_pdu):
    server, cert = https_pdu
    collector = pdu_collector(server.url, ca_file=str(cert))

    [feed] = collector.collect(NOW).samples["feed"]

    assert feed["power_w"] == 6438


def test_verification_can_be_switched_off_explicitly(https_pdu):
    server, _ = https_pdu
    collector = pdu_collector(server.url, verify_tls=False)

    assert collector.collect(NOW).samples["feed"][0]["power_w"] == 6438
