"""A real RFC 3161 timestamping authority for the tests, on 127.0.0.1.

It holds its own root CA and a TSA certificate issued by it (extended key usage
id-kp-timeStamping, critical, as RFC 3161 §2.3 requires), answers ``POST`` queries with a
TimeStampResp whose token is a CMS SignedData over a TSTInfo (ESSCertIDv2 signed attribute,
RSA with SHA-256), and takes its time from ``clock``, so a test can move the TSA's clock apart
from jobgate's. The structures are built with asn1crypto and signed with ``cryptography``;
jobgate checks them with rfc3161-client, an independent implementation.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from asn1crypto import algos, cms, core, tsp
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

POLICY = "1.3.6.1.4.1.57264.2"  # any policy id: the TSA names the one it stamped under


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _certificate(
    subject: str, key: rsa.RSAPrivateKey, issuer: str, issuer_key: rsa.RSAPrivateKey, *, ca: bool, eku: bool
) -> x509.Certificate:
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(datetime(2020, 1, 1, tzinfo=UTC))  # tests stamp at times of their own
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
    if eku:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.TIME_STAMPING]), critical=True)
    builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    builder = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
    )
    return builder.sign(issuer_key, hashes.SHA256())


@dataclass
class LocalTsa:
    """The authority's keys and certificates; ``respond`` turns a query into a reply."""

    name: str = "jobgate test TSA"
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    eku: bool = True  # False: a certificate without id-kp-timeStamping (not a TSA's)
    served: int = 0

    def __post_init__(self) -> None:
        root = f"{self.name} root"
        self.root_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.root = _certificate(root, self.root_key, root, self.root_key, ca=True, eku=False)
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.certificate = _certificate(self.name, self.key, root, self.root_key, ca=False, eku=self.eku)

    def write_roots(self, path: Path) -> Path:
        path.write_bytes(self.root.public_bytes(serialization.Encoding.PEM))
        return path

    def respond(self, query: bytes) -> bytes:
        request = tsp.TimeStampReq.load(query)
        self.served += 1
        info = tsp.TSTInfo(
            {
                "version": "v1",
                "policy": POLICY,
                "message_imprint": request["message_imprint"],
                "serial_number": self.served,
                "gen_time": self.clock().astimezone(UTC),
                "accuracy": {"seconds": 1},
                "nonce": request["nonce"].native,
            }
        )
        cert_der = self.certificate.public_bytes(serialization.Encoding.DER)
        cert = asn1_x509.Certificate.load(cert_der)
        content = info.dump()
        attributes = cms.CMSAttributes(
            [
                {"type": "content_type", "values": ["tst_info"]},
                {"type": "message_digest", "values": [hashlib.sha256(content).digest()]},
                {
                    "type": "signing_certificate_v2",
                    "values": [
                        {
                            "certs": [
                                {
                                    "hash_algorithm": {"algorithm": "sha256"},
                                    "cert_hash": hashlib.sha256(cert_der).digest(),
                                }
                            ]
                        }
                    ],
                },
            ]
        )
        signature = self.key.sign(attributes.dump(), padding.PKCS1v15(), hashes.SHA256())
        signer = cms.SignerInfo(
            {
                "version": "v1",
                "sid": cms.SignerIdentifier(
                    {
                        "issuer_and_serial_number": {
                            "issuer": cert.issuer,
                            "serial_number": cert.serial_number,
                        }
                    }
                ),
                "digest_algorithm": algos.DigestAlgorithm({"algorithm": "sha256"}),
                "signed_attrs": attributes,
                "signature_algorithm": algos.SignedDigestAlgorithm({"algorithm": "sha256_rsa"}),
                "signature": signature,
            }
        )
        signed = cms.SignedData(
            {
                "version": "v3",
                "digest_algorithms": [algos.DigestAlgorithm({"algorithm": "sha256"})],
                "encap_content_info": {"content_type": "tst_info", "content": core.ParsableOctetString(content)},
                "certificates": [cert] if request["cert_req"].native else [],
                "signer_infos": [signer],
            }
        )
        token = cms.ContentInfo({"content_type": "signed_data", "content": signed})
        return tsp.TimeStampResp({"status": {"status": "granted"}, "time_stamp_token": token}).dump()


@contextmanager
def serving(tsa: LocalTsa) -> Iterator[str]:
    """Serve ``tsa`` on an ephemeral port of 127.0.0.1 and yield its URL; stopped on exit."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                reply, status = tsa.respond(body), 200
            except ValueError:
                reply, status = b"", 400
            self.send_response(status)
            self.send_header("Content-Type", "application/timestamp-reply")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/tsa"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
