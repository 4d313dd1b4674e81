"""The SASL server state machine of a listener (kcli.broker.security.authenticator), fed frames in process:
kafka-security.md §2.1 (states, framing), §2.2 (session lifetime, re-authentication), §2.6 (failures)."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.sasl_authenticate.v0.request import SaslAuthenticateRequest as SaslAuthenticateV0
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest as SaslAuthenticateV1
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest as SaslAuthenticateV2
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as SaslHandshakeV1

from kcli.broker.config import load_config
from kcli.broker.security import KafkaPrincipal
from kcli.broker.security.authenticator import SaslAuthenticator, State
from kcli.broker.security.listener_config import listener_security
from kcli.protocol import ApiKey, decode_response, encode_request
from kcli.protocol.sasl import ScramCredential, create_client

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
        'user_admin="admin-secret" user_alice="alice-secret";')


def _security(*extra: str):
    config = load_config(None, ["listeners=PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093",
                                "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
                                f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}", *extra])
    return listener_security(config, config.listeners[1])


class Credentials:
    def __init__(self, users: dict[str, str]) -> None:
        self.creds = {u: ScramCredential.from_password("SCRAM-SHA-256", p, 4096) for u, p in users.items()}

    def scram_credential(self, username: str, mechanism: str):
        return self.creds.get(username) if mechanism == "SCRAM-SHA-256" else None


def _frame(key: int, version: int, body, correlation_id: int = 1) -> bytes:
    return encode_request(key, version, correlation_id, "test", body)[4:]


def _answer(step, key: int, version: int):
    assert step.response is not None
    return decode_response(key, version, step.response[4:])[1]


def _authenticator(*extra: str, credentials=None, clock=None):
    now = [1000.0]
    auth = SaslAuthenticator(_security(*extra), client_address="127.0.0.1", credentials=credentials,
                             clock=clock or (lambda: now[0]))
    return auth, now


def test_api_versions_then_handshake_v1_then_framed_plain():
    auth, _ = _authenticator()
    step = auth.receive(_frame(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                        client_software_version="1")))
    versions = _answer(step, ApiKey.API_VERSIONS, 3)
    served = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in versions.api_keys}
    assert served[17] == (0, 1) and served[36] == (0, 2)
    assert auth.state is State.HANDSHAKE_REQUEST
    handshake = _answer(auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeV1(mechanism="PLAIN"))),
                        ApiKey.SASL_HANDSHAKE, 1)
    assert handshake.error_code == ErrorCode.none and list(handshake.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
    step = auth.receive(_frame(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateV2(auth_bytes=b"\0alice\0alice-secret")))
    assert step.complete and not step.fail
    answer = _answer(step, ApiKey.SASL_AUTHENTICATE, 2)
    assert answer.error_code == ErrorCode.none and answer.session_lifetime == datetime.timedelta(0)
    assert auth.session.principal == KafkaPrincipal("User", "alice")
    assert (auth.session.listener_name, auth.session.security_protocol, auth.session.sasl_mechanism) == (
        "SASL_PLAINTEXT", "SASL_PLAINTEXT", "PLAIN")
    assert auth.session_expiry is None


def test_handshake_v0_takes_raw_tokens():
    auth, _ = _authenticator()
    _answer(auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeV0(mechanism="PLAIN"))), ApiKey.SASL_HANDSHAKE, 0)
    step = auth.receive(b"\0alice\0alice-secret")  # no request header
    assert step.complete and step.response == b"\x00\x00\x00\x00"  # PLAIN's empty token, raw


def test_raw_token_failure_sends_nothing():
    auth, _ = _authenticator()
    auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeV0(mechanism="PLAIN")))
    step = auth.receive(b"\0alice\0wrong")
    assert step.fail and step.response is None


@pytest.mark.parametrize("token,message", [
    (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
    (b"\0nobody\0x", "Authentication failed: Invalid username or password"),
    (b"\0\0x", "Authentication failed: username not specified"),
])
def test_a_failed_plain_login_answers_sasl_authentication_failed(token, message):
    auth, _ = _authenticator()
    auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeV1(mechanism="PLAIN")))
    step = auth.receive(_frame(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateV1(auth_bytes=token)))
    assert step.fail
    answer = _answer(step, ApiKey.SASL_AUTHENTICATE, 1)
    assert answer.error_code == ErrorCode.sasl_authentication_failed
    assert answer.error_message == message
    assert auth.state is State.FAILED


def test_unsupported_mechanism_lists_the_enabled_ones_and_fails():
    auth, _ = _authenticator()
    step = auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeV1(mechanism="GSSAPI")))
    answer = _answer(step, ApiKey.SASL_HANDSHAKE, 1)
    assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
    assert list(answer.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
    assert step.fail


def test_another_request_before_authentication_fails_without_answer():
    auth, _ = _authenticator()
    step = auth.receive(_frame(ApiKey.METADATA, 1, MetadataRequest(topics=None)))
    assert step.fail and step.response is None


def test_a_second_api_versions_is_an_illegal_state():
    auth, _ = _authenticator()
    request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    auth.receive(_frame(ApiKey.API_VERSIONS, 3, request))
    step = auth.receive(_frame(ApiKey.API_VERSIONS, 3, request))
    assert step.fail and step.response is None


def test_a_handshake_during_authenticate_is_answered_illegal_sasl_state():
    auth, _ = _authenticator()
    auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeV1(mechanism="PLAIN")))
    step = auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeV1(mechanism="PLAIN"), 2))
    assert step.fail
    assert _answer(step, ApiKey.SASL_HANDSHAKE, 1).error_code == ErrorCode.illegal_sasl_state


def test_garbage_first_packet_fails():
    auth, _ = _authenticator()
    assert auth.receive(b"GET / HTTP/1.1\r\n").fail
    auth, _ = _authenticator()
    step = auth.oversized(600_000)
    assert step.fail and step.response is None


def test_scram_sha_256_with_the_credential_cache():
    auth, _ = _authenticator(credentials=Credentials({"bob": "bob-secret"}))
    auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeV1(mechanism="SCRAM-SHA-256")))
    client = create_client("SCRAM-SHA-256", username="bob", password="bob-secret")
    first = _answer(auth.receive(_frame(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateV2(auth_bytes=client.initial()))),
                    ApiKey.SASL_AUTHENTICATE, 2)
    assert first.error_code == ErrorCode.none
    final = client.evaluate(first.auth_bytes)
    step = auth.receive(_frame(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateV2(auth_bytes=final), 3))
    assert step.complete
    client.evaluate(_answer(step, ApiKey.SASL_AUTHENTICATE, 2).auth_bytes)  # the server's signature checks out
    assert client.complete
    assert auth.session.principal == KafkaPrincipal("User", "bob")


def test_scram_without_credentials_is_the_generic_failure():
    auth, _ = _authenticator(credentials=None)  # no credential cache: no SCRAM users
    auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeV1(mechanism="SCRAM-SHA-256")))
    client = create_client("SCRAM-SHA-256", username="bob", password="x")
    step = auth.receive(_frame(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateV2(auth_bytes=client.initial())))
    assert step.fail
    assert _answer(step, ApiKey.SASL_AUTHENTICATE, 2).error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256")


def test_session_lifetime_from_connections_max_reauth_ms():
    auth, now = _authenticator("listener.name.sasl_plaintext.plain.connections.max.reauth.ms=60000")
    auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeV1(mechanism="PLAIN")))
    step = auth.receive(_frame(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateV1(auth_bytes=b"\0alice\0alice-secret")))
    assert _answer(step, ApiKey.SASL_AUTHENTICATE, 1).session_lifetime == datetime.timedelta(seconds=60)
    assert auth.session_expiry == now[0] + 60
    # v0 has no lifetime field; the broker enforces the expiry all the same
    auth, now = _authenticator("connections.max.reauth.ms=5000")
    auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeV1(mechanism="PLAIN")))
    step = auth.receive(_frame(ApiKey.SASL_AUTHENTICATE, 0, SaslAuthenticateV0(auth_bytes=b"\0alice\0alice-secret")))
    assert step.complete and auth.session_expiry == now[0] + 5


def test_reauthentication_keeps_mechanism_and_principal():
    auth, _ = _authenticator("connections.max.reauth.ms=5000")
    auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeV1(mechanism="PLAIN")))
    auth.receive(_frame(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateV2(auth_bytes=b"\0alice\0alice-secret")))
    session = auth.session
    again = SaslAuthenticator(auth.security, client_address="127.0.0.1", reauthenticating=session)
    again.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeV1(mechanism="PLAIN")))
    assert again.receive(_frame(ApiKey.SASL_AUTHENTICATE, 2,
                                SaslAuthenticateV2(auth_bytes=b"\0alice\0alice-secret"))).complete
    # another principal
    other = SaslAuthenticator(auth.security, client_address="127.0.0.1", reauthenticating=session)
    other.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeV1(mechanism="PLAIN")))
    step = other.receive(_frame(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateV2(auth_bytes=b"\0admin\0admin-secret")))
    assert step.fail
    assert "Cannot change principals during re-authentication from User:alice" in _answer(
        step, ApiKey.SASL_AUTHENTICATE, 2).error_message
    # another mechanism
    switch = SaslAuthenticator(auth.security, client_address="127.0.0.1", reauthenticating=session)
    step = switch.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeV1(mechanism="SCRAM-SHA-256")))
    assert step.fail
    assert _answer(step, ApiKey.SASL_HANDSHAKE, 1).error_code == ErrorCode.unsupported_sasl_mechanism

