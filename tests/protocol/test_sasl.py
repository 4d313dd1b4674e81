"""SASL mechanisms (kcli.protocol.sasl): RFC 7677's SCRAM-SHA-256 vector, client/server round trips, and every
failure Kafka's servers raise (their texts, hidden or sent)."""

from __future__ import annotations

import base64
import json

import pytest

from kcli.protocol import sasl
from kcli.protocol.sasl import (
    IllegalSaslStateError,
    SaslAuthenticationError,
    ScramCredential,
    create_client,
    create_server,
    unsecured_token,
)
from kcli.protocol.sasl import scram as scram_module

# RFC 7677 section 3 (also kafka-security.md 2.4).
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
RFC_STORED = ("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=,"
              "server_key=wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=,iterations=4096")


class Users:
    """SaslServerCallbacks over plain dicts."""

    def __init__(self, passwords=None, credentials=None):
        self.passwords = passwords or {}
        self.credentials = credentials or {}

    def plain_password(self, username):
        return self.passwords.get(username)

    def scram_credential(self, username, mechanism):
        return self.credentials.get((username, mechanism))


def scram_users(mechanism, user="alice", password="alice-secret", iterations=4096):
    return Users(credentials={(user, mechanism): ScramCredential.from_password(mechanism, password, iterations)})


def run(client, server):
    """Drive one exchange as an authenticator would; returns the server's last token."""
    token = client.initial()
    while True:
        challenge = server.evaluate(token)
        if server.complete:
            token = client.evaluate(challenge)
            assert token == b""
            return challenge
        token = client.evaluate(challenge)


@pytest.fixture
def fixed_server_nonce(monkeypatch):
    monkeypatch.setattr(scram_module, "secure_random_string", lambda: RFC_SERVER_NONCE)


# ------------------------------------------------------------------------------------------ RFC 7677 vector


def test_rfc7677_credential_as_kafka_stores_it():
    credential = ScramCredential.from_password("SCRAM-SHA-256", "pencil", 4096, salt=RFC_SALT)
    assert credential.to_config_string() == RFC_STORED
    assert ScramCredential.from_config_string(RFC_STORED) == credential
    assert "stored_key" not in repr(credential) and "WG5d" not in repr(credential)


def test_rfc7677_client_messages():
    client = scram_module.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.initial() == RFC_CLIENT_FIRST
    assert client.evaluate(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert not client.complete
    assert client.evaluate(RFC_SERVER_FINAL) == b""
    assert client.complete


def test_rfc7677_server_messages(fixed_server_nonce):
    server = create_server("SCRAM-SHA-256", Users(credentials={
        ("user", "SCRAM-SHA-256"): ScramCredential.from_config_string(RFC_STORED)}))
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not server.complete
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.authorization_id == "user" and server.mechanism == "SCRAM-SHA-256"


def test_client_refuses_a_wrong_server_signature():
    client = scram_module.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.initial()
    client.evaluate(RFC_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationError, match="Invalid server signature in server final message"):
        client.evaluate(b"v=" + base64.b64encode(bytes(32)))
    assert not client.complete


def test_client_refuses_a_server_nonce_not_extending_its_own_and_too_few_iterations():
    client = scram_module.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.initial()
    with pytest.raises(SaslAuthenticationError, match="does not start with client nonce"):
        client.evaluate(b"r=other,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    client = scram_module.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.initial()
    with pytest.raises(SaslAuthenticationError, match="Requested iterations 4095 is less than the minimum 4096"):
        client.evaluate(RFC_SERVER_FIRST.replace(b"i=4096", b"i=4095"))
    client = scram_module.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.initial()
    client.evaluate(RFC_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationError, match="failed with error: other-error"):
        client.evaluate(b"e=other-error")


# ------------------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_round_trip(mechanism):
    server = create_server(mechanism, scram_users(mechanism, iterations=8192))
    client = create_client(mechanism, username="alice", password="alice-secret")
    final = run(client, server)
    assert final.startswith(b"v=")
    assert server.complete and client.complete and server.authorization_id == "alice"
    assert server.expiry_ms is None


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_user_name_with_comma_and_equals_is_escaped(mechanism):
    user = "a,b=c"
    assert create_client(mechanism, username=user, password="pw").initial().startswith(b"n,,n=a=2Cb=3Dc,r=")
    server = create_server(mechanism, scram_users(mechanism, user=user))
    run(create_client(mechanism, username=user, password="alice-secret"), server)
    assert server.authorization_id == user


def test_plain_round_trip():
    server = create_server("PLAIN", Users(passwords={"alice": "alice-secret"}))
    client = create_client("PLAIN", username="alice", password="alice-secret")
    token = client.initial()
    assert token == b"\0alice\0alice-secret"
    assert server.evaluate(token) == b""
    assert server.complete and server.authorization_id == "alice"
    assert client.evaluate(b"") == b"" and client.complete


def test_plain_with_matching_authzid():
    server = create_server("PLAIN", Users(passwords={"alice": "pw"}))
    assert server.evaluate(b"alice\0alice\0pw") == b"" and server.authorization_id == "alice"


def test_oauthbearer_round_trip():
    server = create_server("OAUTHBEARER", Users())
    client = create_client("OAUTHBEARER", username="admin")
    token = client.initial()
    assert token.startswith(b"n,,\x01auth=Bearer eyJ") and token.endswith(b".\x01\x01")
    assert server.evaluate(token) == b""
    assert server.complete and server.authorization_id == "admin"
    assert server.expiry_ms is not None and server.expiry_ms > 0
    assert client.evaluate(b"") == b"" and client.complete


def test_oauthbearer_extensions_and_required_scope():
    server = create_server("OAUTHBEARER", Users(),
                           options={"unsecuredValidatorRequiredScope": "read write"})
    token = unsecured_token("bob", scope=("read", "write", "other"))
    client = create_client("OAUTHBEARER", token=token, extensions={"traceId": "123"})
    assert server.evaluate(client.initial()) == b""
    assert server.authorization_id == "bob" and server.extensions == {"traceId": "123"}


# ------------------------------------------------------------------------------------------ failures


def test_plain_failures_carry_kafkas_text():
    users = Users(passwords={"alice": "alice-secret"})
    cases = [
        (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0nobody\0x", "Authentication failed: Invalid username or password"),
        (b"\0\0x", "Authentication failed: username not specified"),
        (b"\0alice\0", "Authentication failed: password not specified"),
        (b"bob\0alice\0alice-secret",
         "Authentication failed: Client requested an authorization id that is different from username"),
        (b"alice\0alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"a\0b\0c\0d", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
    ]
    for token, text in cases:
        server = create_server("PLAIN", users)
        with pytest.raises(SaslAuthenticationError) as e:
            server.evaluate(token)
        assert str(e.value) == text and not e.value.generic and e.value.error_code == 58
        assert not server.complete


def test_plain_callback_failure_is_not_a_traceback():
    class Broken(Users):
        def plain_password(self, username):
            raise OSError("disk")

    with pytest.raises(SaslAuthenticationError, match="credentials for user could not be verified"):
        create_server("PLAIN", Broken()).evaluate(b"\0a\0b")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_is_hidden(mechanism):
    server = create_server(mechanism, scram_users(mechanism))
    client = create_client(mechanism, username="alice", password="wrong")
    with pytest.raises(SaslAuthenticationError) as e:
        run(client, server)
    assert str(e.value) == ("Authentication failed during authentication due to invalid credentials with SASL "
                            f"mechanism {mechanism}")
    assert e.value.generic and e.value.detail == "Invalid client credentials"
    assert not server.complete
    with pytest.raises(IllegalSaslStateError):
        server.evaluate(b"anything")


def test_scram_unknown_user_fails_at_the_first_message():
    server = create_server("SCRAM-SHA-256", scram_users("SCRAM-SHA-256"))
    with pytest.raises(SaslAuthenticationError) as e:
        server.evaluate(b"n,,n=nobody,r=abc")
    assert e.value.generic and e.value.detail == "Authentication failed: Invalid user credentials"
    # The same user but the other mechanism has no credential either.
    with pytest.raises(SaslAuthenticationError):
        create_server("SCRAM-SHA-512", scram_users("SCRAM-SHA-256")).evaluate(b"n,,n=alice,r=abc")


def test_scram_authzid_must_be_the_user():
    server = create_server("SCRAM-SHA-256", scram_users("SCRAM-SHA-256"))
    with pytest.raises(SaslAuthenticationError) as e:
        server.evaluate(b"n,a=bob,n=alice,r=abc")
    assert str(e.value) == ("Authentication failed: Client requested an authorization id that is different from "
                            "username") and not e.value.generic
    server = create_server("SCRAM-SHA-256", scram_users("SCRAM-SHA-256"))
    assert server.evaluate(b"n,a=alice,n=alice,r=abc").startswith(b"r=abc")


def test_scram_stored_iterations_below_the_minimum_fail():
    users = Users(credentials={("alice", "SCRAM-SHA-256"): ScramCredential.from_password(
        "SCRAM-SHA-256", "pw", iterations=1000)})
    with pytest.raises(SaslAuthenticationError) as e:
        create_server("SCRAM-SHA-256", users).evaluate(b"n,,n=alice,r=abc")
    assert e.value.detail == "Iterations 1000 is less than the minimum 4096 for SCRAM-SHA-256"


def _final_with_nonce(server_first: bytes, bare: str, password: str, nonce: str, mechanism="SCRAM-SHA-256"):
    """A client-final for ``nonce`` with a correct proof over what is sent."""
    first = scram_module.ServerFirstMessage.parse(server_first)
    mech = scram_module.ScramMechanism.from_name(mechanism)
    salted = scram_module.salted_password(mech, password, first.salt, first.iterations)
    without_proof = f"c=biws,r={nonce}"
    auth = f"{bare},{first.text},{without_proof}".encode()
    ck = scram_module.client_key(mech, salted)
    sig = scram_module._hmac(mech, scram_module._hash(mech, ck), auth)
    proof = bytes(a ^ b for a, b in zip(ck, sig))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode(), first.nonce


def test_scram_client_final_nonce_must_end_with_the_server_first_nonce():
    server = create_server("SCRAM-SHA-256", scram_users("SCRAM-SHA-256"))
    server_first = server.evaluate(b"n,,n=alice,r=cnonce")
    final, _ = _final_with_nonce(server_first, "n=alice,r=cnonce", "alice-secret", "cnonce" + "forged")
    with pytest.raises(SaslAuthenticationError) as e:
        server.evaluate(final)
    assert e.value.detail == "Invalid client nonce in the final client message." and e.value.generic


def test_scram_client_final_nonce_with_the_client_nonce_repeated_is_accepted():
    """Debian's kcat (librdkafka 2.0) sends its own nonce twice: Kafka 3.9's endsWith check accepts it."""
    server = create_server("SCRAM-SHA-256", scram_users("SCRAM-SHA-256"))
    server_first = server.evaluate(b"n,,n=alice,r=cnonce")
    nonce = scram_module.ServerFirstMessage.parse(server_first).nonce
    final, _ = _final_with_nonce(server_first, "n=alice,r=cnonce", "alice-secret", "cnonce" + nonce)
    assert server.evaluate(final).startswith(b"v=") and server.complete


@pytest.mark.parametrize("token", [
    b"", b"garbage", b"y,,n=alice,r=abc", b"p=tls-unique,,n=alice,r=abc", b"n,,n=alice", b"n,,r=abc,n=alice",
    b"n,,n=al=ice,r=abc", b"n,,n=alice,r=a b", "n,,n=alic\u00e9,r=abc".encode(), b"\xff\xfe",
])
def test_scram_bad_client_first(token):
    with pytest.raises(SaslAuthenticationError) as e:
        create_server("SCRAM-SHA-256", scram_users("SCRAM-SHA-256")).evaluate(token)
    assert e.value.generic


@pytest.mark.parametrize("token", [
    b"", b"garbage", b"c=biws,r=x", b"c=biws,p=AAAA", b"c=b!ws,r=x,p=AAAA", b"c=biws,r=x,p=AAA",
])
def test_scram_bad_client_final(token):
    server = create_server("SCRAM-SHA-256", scram_users("SCRAM-SHA-256"))
    server.evaluate(b"n,,n=alice,r=abc")
    with pytest.raises(SaslAuthenticationError) as e:
        server.evaluate(token)
    assert e.value.generic and not server.complete


def test_scram_short_proof_is_refused_not_crashing():
    server = create_server("SCRAM-SHA-256", scram_users("SCRAM-SHA-256"))
    nonce = scram_module.ServerFirstMessage.parse(server.evaluate(b"n,,n=alice,r=abc")).nonce
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.evaluate(f"c=biws,r={nonce},p=AAAA".encode())


def test_scram_extensions_are_parsed_and_tokenauth_without_a_token_store_fails():
    first = scram_module.ClientFirstMessage.parse(b"n,,n=alice,r=abc,tokenauth=true,other=x")
    assert first.extensions == {"tokenauth": "true", "other": "x"} and first.token_authenticated
    assert first.bare == "n=alice,r=abc,tokenauth=true,other=x"
    with pytest.raises(SaslAuthenticationError) as e:
        create_server("SCRAM-SHA-256", scram_users("SCRAM-SHA-256")).evaluate(
            b"n,,n=tokenid,r=abc,tokenauth=TRUE")
    assert e.value.detail == "Token Authentication failed: Invalid tokenId : tokenid"


def test_scram_tokenauth_with_a_token_store():
    credential = ScramCredential.from_password("SCRAM-SHA-512", "hmac-of-token")

    class Tokens(Users):
        def delegation_token(self, token_id, mechanism):
            return ("owner", credential, 123_000) if token_id == "tid" else None

    server = create_server("SCRAM-SHA-512", Tokens())
    client = create_client("SCRAM-SHA-512", username="tid", password="hmac-of-token",
                           extensions={"tokenauth": "true"})
    run(client, server)
    assert server.authorization_id == "owner" and server.expiry_ms == 123_000


def test_scram_unknown_extensions_are_ignored():
    server = create_server("SCRAM-SHA-256", scram_users("SCRAM-SHA-256"))
    client = create_client("SCRAM-SHA-256", username="alice", password="alice-secret", extensions={"foo": "bar"})
    run(client, server)
    assert server.complete


def test_credential_string_parsing_is_strict():
    for text in ["", "salt=AA==", RFC_STORED + ",extra=1", RFC_STORED.replace("iterations=4096", "iterations=x"),
                 RFC_STORED.replace("salt=", "=salt"), RFC_STORED.replace("salt=W22", "salt=!22")]:
        with pytest.raises(ValueError, match="Credentials not valid"):
            ScramCredential.from_config_string(text)


def test_credential_from_password_defaults_like_kafka():
    a = ScramCredential.from_password("SCRAM-SHA-512", "pw")
    b = ScramCredential.from_password("SCRAM-SHA-512", "pw")
    assert a.iterations == 4096 and a.salt != b.salt
    assert a.salt.decode("ascii").isalnum() and len(a.stored_key) == len(a.server_key) == 64
    assert ScramCredential.from_password("SCRAM-SHA-512", "pw", salt=a.salt) == a


def test_mechanism_codes():
    assert sasl.ScramMechanism.from_name("scram-sha-512").value == 2
    assert sasl.ScramMechanism.from_code(1).mechanism_name == "SCRAM-SHA-256"
    assert sasl.ScramMechanism.from_code(0) is None
    with pytest.raises(ValueError):
        sasl.ScramMechanism.from_name("SCRAM-SHA-1")


def _jws(header, claims, signature=""):
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc(header)}.{enc(claims)}.{signature}"


@pytest.mark.parametrize("token,status", [
    (_jws({"alg": "HS256"}, {"sub": "a", "exp": 4102444800}), "invalid_token"),
    (_jws({"alg": "none"}, {"sub": "a", "exp": 4102444800}, "sig"), "invalid_token"),
    (_jws({"alg": "none"}, {"sub": "a"}), "invalid_token"),
    (_jws({"alg": "none"}, {"exp": 4102444800}), "invalid_token"),
    (_jws({"alg": "none"}, {"sub": 5, "exp": 4102444800}), "invalid_token"),
    (_jws({"alg": "none"}, {"sub": "a", "exp": 1000}), "invalid_token"),
    (_jws({"alg": "none"}, {"sub": "a", "exp": 4102444800, "iat": 4102444801}), "invalid_token"),
    (_jws({"alg": "none"}, {"sub": "a", "exp": "soon"}), "invalid_token"),
    ("abc.def.", "invalid_token"),
    ("abc", "invalid_token"),
])
def test_oauthbearer_bad_token_gets_the_json_error_then_fails(token, status):
    server = create_server("OAUTHBEARER", Users())
    client = create_client("OAUTHBEARER", token=token)
    challenge = server.evaluate(client.initial())
    assert json.loads(challenge) == {"status": status} and not server.complete
    ack = client.evaluate(challenge)
    assert ack == b"\x01" and not client.complete
    with pytest.raises(SaslAuthenticationError) as e:
        server.evaluate(ack)
    assert str(e.value) == f'{{"status":"{status}"}}' and not e.value.generic


def test_oauthbearer_missing_scope_is_insufficient_scope():
    server = create_server("OAUTHBEARER", Users(), options={"unsecuredValidatorRequiredScope": "admin"})
    challenge = server.evaluate(create_client("OAUTHBEARER", token=unsecured_token("a", scope=("x",))).initial())
    assert challenge == b'{"status":"insufficient_scope", "scope":"[admin]"}'


def test_oauthbearer_clock_skew_and_principal_claim_options():
    token = unsecured_token("carol", now=1000.0, lifetime_s=10, principal_claim="user")
    options = {"unsecuredValidatorPrincipalClaimName": "user", "unsecuredValidatorAllowableClockSkewMs": "5000"}
    server = create_server("OAUTHBEARER", Users(), options=options, clock=lambda: 1012.0)
    assert server.evaluate(create_client("OAUTHBEARER", token=token).initial()) == b""
    assert server.authorization_id == "carol" and server.expiry_ms == 1_010_000
    late = create_server("OAUTHBEARER", Users(), options=options, clock=lambda: 1016.0)
    assert late.evaluate(create_client("OAUTHBEARER", token=token).initial()).startswith(b'{"status"')


@pytest.mark.parametrize("token", [
    b"", b"garbage", b"n,,\x01\x01", b"n,,\x01auth=Basic abc\x01\x01", b"n,,\x01auth=Bearer\x01\x01",
    b"n,,auth=Bearer abc\x01\x01", b"\x01",
])
def test_oauthbearer_bad_initial_response(token):
    with pytest.raises(SaslAuthenticationError) as e:
        create_server("OAUTHBEARER", Users()).evaluate(token)
    assert e.value.generic


def test_oauthbearer_authzid_must_be_the_principal():
    token = unsecured_token("alice")
    with pytest.raises(SaslAuthenticationError, match=r"authorization id \(bob\) that is different"):
        create_server("OAUTHBEARER", Users()).evaluate(
            create_client("OAUTHBEARER", token=token, authorization_id="bob").initial())


def test_unknown_mechanism():
    with pytest.raises(ValueError):
        create_server("GSSAPI", Users())
    with pytest.raises(ValueError):
        create_client("GSSAPI")
    assert sasl.SERVER_MECHANISMS == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def test_authorization_id_before_completion_is_an_illegal_state():
    for mechanism in sasl.SERVER_MECHANISMS:
        server = create_server(mechanism, Users())
        with pytest.raises(IllegalSaslStateError) as e:
            server.authorization_id
        assert e.value.error_code == 34
