"""bench/librdkafka_suite.py's secure target: the test CA, broker keystore and client keys it writes for librdkafka's
0097 must be what a TLS server with ssl.client.auth=required and a verifying client accept (in-process, Python's
ssl over a socket pair), and the encodings 0097 loads (DER, PKCS#12 with the CA) must hold the same key and chain."""

from __future__ import annotations

import importlib.util
import socket
import ssl
import sys
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

REPO = Path(__file__).resolve().parents[2]


def _suite():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("librdkafka_suite", REPO / "bench" / "librdkafka_suite.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault("librdkafka_suite", module)  # its dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(REPO / "bench"))


def test_secure_files_make_a_mutual_tls_handshake(tmp_path: Path) -> None:
    suite = _suite()
    files = suite.make_secure_files(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(files["broker"])
    server.load_verify_locations(files["ca"])
    server.verify_mode = ssl.CERT_REQUIRED  # ssl.client.auth=required
    client = ssl.create_default_context(cafile=str(files["ca"]))  # checks the host name: 127.0.0.1 (IP SAN)
    client.load_cert_chain(files["client_cert"], files["client_key"], password=suite.SECURE_KEY_PASSWORD)

    a, b = socket.socketpair()
    seen: dict = {}

    def serve() -> None:
        with server.wrap_socket(a, server_side=True) as tls:
            seen["peer"] = tls.getpeercert()
            tls.sendall(b"ok")

    thread = threading.Thread(target=serve)
    thread.start()
    with client.wrap_socket(b, server_hostname="127.0.0.1") as tls:
        assert tls.recv(2) == b"ok"
    thread.join(10)
    assert dict(x[0] for x in seen["peer"]["subject"])["commonName"] == "client"


def test_secure_files_encodings_hold_one_key_and_chain(tmp_path: Path) -> None:
    suite = _suite()
    files = suite.make_secure_files(tmp_path)
    password = suite.SECURE_KEY_PASSWORD.encode()
    key = serialization.load_pem_private_key(files["client_key"].read_bytes(), password)
    der_key = serialization.load_der_private_key(files["client_key_der"].read_bytes(), None)
    cert = x509.load_pem_x509_certificate(files["client_cert"].read_bytes())
    ca = x509.load_pem_x509_certificate(files["ca"].read_bytes())
    assert x509.load_der_x509_certificate(files["client_cert_der"].read_bytes()) == cert
    assert x509.load_der_x509_certificate(files["ca_der"].read_bytes()) == ca
    assert der_key.private_numbers() == key.private_numbers()
    p12_key, p12_cert, p12_cas = pkcs12.load_key_and_certificates(files["client_p12"].read_bytes(), password)
    assert p12_cert == cert and p12_cas == [ca] and p12_key.private_numbers() == key.private_numbers()
    cert.verify_directly_issued_by(ca)
    env = suite.ssl_env(files)
    assert env["SSL_password"] == suite.SECURE_KEY_PASSWORD and Path(env["SSL_pkcs"]) == files["client_p12"]
