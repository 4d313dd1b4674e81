#!/usr/bin/env python3
"""librdkafka's own integration test suite (tests/test-runner) against `kctl broker run` and a 3-broker
`kctl cluster run`.

librdkafka's tests/ directory holds ~170 tests, compiled into one program, `test-runner`, that reads the brokers
from `test.conf` and picks tests by number (`TESTS=0045`). Which of them are "broker tests", the set run here:

* every entry of tests/test.c's test table, less those flagged TEST_F_LOCAL (need no broker: unit tests, the
  mock cluster, configuration), TEST_F_MANUAL (run by hand only);
* less TEST_F_SOCKEM (they put librdkafka's socket emulator between client and broker to inject delays and
  disconnects: they test the client's network handling, not the broker);
* less TEST_F_KNOWN_ISSUE (librdkafka marks them broken; its own runner skips them unless -k);
* less the tests whose name ends in `_mock` but lack the local flag (0139, 0150 in 2.12.0): they start
  librdkafka's mock cluster and never talk to test.conf's brokers.

With librdkafka 2.12.0 (what `node-rdkafka@3.6.1` bundles, the default source) that is 97 tests. Some of them
skip themselves here by design, and are reported as skip: on single and cluster the SSL/SASL/OIDC ones (0097,
0126, 0135, 0142: plaintext listeners; the secure targets run them but 0126, which needs an OIDC token
server), 0098 (its Java producer needs RapidJSON and Kafka's jars), 0153 (KIP-848 consumer groups only), parts
of 0016 (broker JMX). The 4 tests of the `noautocreate` scenario (0045 two of them, 0107,
0111) run with `-s noautocreate` against a second start of the target with auto.create.topics.enable=false,
as librdkafka's trivup scenarios do.

Targets, configured as librdkafka's trivup clusters are (tests/scenarios/*.json, cluster_testing.py):
num.partitions=4, default.replication.factor min(brokers, 3), auto.create.topics.enable per scenario,
broker.rack=RACK<broker id> and replica.selector.class=RackAwareReplicaSelector (0101 sets client.rack to
"RACK<id>" of a follower and checks that the follower serves its fetches):

* single:  `kctl broker run` (one broker, standalone);
* cluster: `kctl cluster run --brokers 3 --racks 3 --rack-prefix RACK` (ZooKeeper mode; Debian's zookeeper).
* secure: the tests that need TLS or SASL (SECURE_PLAN), as librdkafka's CI runs them under trivup: one
  `kctl broker run` with an SSL listener (ssl.client.auth=required) for 0097, a SASL_SSL listener (PLAIN,
  SCRAM-SHA-256/512, unsecured OAUTHBEARER) for 0135 and 0081's ACL, SCRAM-credential and authorized-operations
  sub-tests (SUBTESTS=...), AclAuthorizer with allow.everyone.if.no.acl.found=true, a SCRAM user set through
  `kctl users set-scram`, a test CA and client keys in PEM, DER and PKCS#12 made with `cryptography` and the
  SSL_* variables 0097 reads; then `kctl cluster run --security` (0142 creates topics of replication factor 3)
  with connections.max.reauth.ms (--reauth-ms, 10000 as librdkafka's CI) and OAUTHBEARER added, 0142 once with
  SCRAM-SHA-512 and once with OAUTHBEARER. Columns secure-<variant> and secure-cluster-<variant>.

Each test number runs in its own `test-runner` process (`TESTS=<number> ./test-runner -L -E -p1`; several
names share a number, e.g. 0045's, and then run one after the other in that process), niced, under a
wall-clock timeout, --jobs at a time. Not with -Q (librdkafka's CI's quick mode) unless --quick: it skips every
sub-test not marked quick, and 0045_subscribe_update, for one, then does nothing and passes. test.conf sets
bootstrap.servers and test.timeout.multiplier; TEST_KAFKA_VERSION is Kafka's version kctl follows (3.7.0). Tests that shell out to Kafka's scripts
(kafka-topics.sh: 0045, 0052, 0077; kafka-acls.sh: 0115, 0119) get KAFKA_PATH=<workdir>/kafka whose bin/ holds
stand-ins that do the same through the Admin API (confluent-kafka, a test dependency of kcli).

Results: a table of pass/fail/skip/timeout per test and target and the totals; every failing process's output
and the brokers' logs are kept under --out (default ~/.cache/kcli-bench/librdkafka-suite-runs/<time>/), the
table also as results.json there.

The suite is built once into ~/.cache/kcli-bench/librdkafka-suite-<version>/ (or $XDG_CACHE_HOME/...), about
6 minutes on 2 cores: librdkafka's source from `npm pack node-rdkafka@3.6.1` (as bench_rdkafka.py gets it) or
--librdkafka-src DIR (a clone or `git archive` of confluentinc/librdkafka), `./configure --disable-gssapi
--disable-curl --disable-zstd --disable-lz4-ext` (and --disable-ssl without OpenSSL's headers), `make libs`,
`make -C tests build`. Needs gcc, g++, make, zlib's headers, npm for the default source.

Usage: bench/librdkafka_suite.py [--targets single,cluster,secure] [--tests 0001,0045,...] [--jobs 2]
         [--timeout 900] [--timeout-multiplier 2] [--quick] [--librdkafka-src DIR] [--build-only] [--list]
         [--out DIR] [--reauth-ms 10000] [--no-pin]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import bench_broker as bb  # noqa: E402  (free_port, wait_listening, stop_process, tail)
import bench_rdkafka as br  # noqa: E402  (cache_root, source_version, the npm source, _run)

KAFKA_VERSION = "3.7.0"  # the Kafka kctl follows: TEST_KAFKA_VERSION gates tests and their sub-tests
SCENARIOS = ("default", "noautocreate")
CONFIGURE = ["--disable-gssapi", "--disable-curl", "--disable-zstd", "--disable-lz4-ext"]
# trivup's broker config for librdkafka's tests (scenarios/*.json, cluster_testing.py)
TRIVUP_OVERRIDES = ("num.partitions=4",
                    "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector")
EXCLUDED_FLAGS = {
    "TEST_F_LOCAL": "needs no broker",
    "TEST_F_MANUAL": "manual",
    "TEST_F_SOCKEM": "socket emulation (client network faults)",
    "TEST_F_KNOWN_ISSUE": "librdkafka's known issue",
}
STATES = {"PASSED": "pass", "FAILED": "fail", "SKIPPED": "skip", "RUNNING": "fail", "NOT_STARTED": "skip"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SUMMARY_LINE = re.compile(r"^\|\s*(\S+)\s*\|\s*(PASSED|FAILED|SKIPPED|RUNNING|NOT_STARTED)\s*\|\s*([\d.]+)s\s*\|"
                          r"\s*(.*)$")


# -- building test-runner ------------------------------------------------------------------------------
def suite_home(version: str) -> Path:
    return br.cache_root() / f"librdkafka-suite-{version}"


def build_suite(source: Path | None) -> Path:
    """librdkafka's tests/ directory with test-runner built (cached); building takes minutes on 2 cores."""
    version = br.source_version(source.resolve()) if source is not None else br.NODE_RDKAFKA_LIBRDKAFKA
    home = suite_home(version)
    tree = home / "librdkafka"
    stamp = home / "built"
    if stamp.is_file() and (tree / "tests" / "test-runner").is_file():
        return tree / "tests"
    missing = [tool for tool in ("gcc", "g++", "make") if shutil.which(tool) is None]
    if missing or not Path("/usr/include/zlib.h").exists():
        raise RuntimeError(f"building librdkafka's test-runner needs gcc, g++, make and zlib's headers "
                           f"(apt-get install -y build-essential zlib1g-dev); missing: {missing or 'zlib.h'}")
    home.mkdir(parents=True, exist_ok=True)
    log = home / "build.log"
    shutil.rmtree(tree, ignore_errors=True)
    print(f"building librdkafka {version} and its test-runner in {home}; log {log} ...", flush=True)
    started = time.monotonic()
    if source is not None:
        shutil.copytree(source.resolve(), tree, ignore=shutil.ignore_patterns(".git"))
    else:
        unpacked = br._npm_source(home / "npm", log)
        unpacked.rename(tree)
        shutil.rmtree(home / "npm", ignore_errors=True)
    configure = CONFIGURE + ([] if Path("/usr/include/openssl/ssl.h").exists() else ["--disable-ssl"])
    jobs = f"-j{os.cpu_count() or 1}"
    br._run(["./configure"] + configure, tree, log)
    br._run(["make", jobs, "libs"], tree, log, timeout=3600)
    br._run(["make", jobs, "-C", "tests", "build"], tree, log, timeout=3600)
    stamp.write_text(f"librdkafka {version}, configure {' '.join(configure)}\n")
    print(f"built {tree / 'tests' / 'test-runner'} in {time.monotonic() - started:.0f}s", flush=True)
    return tree / "tests"


# -- which tests -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SuiteTest:
    name: str  # 0045_subscribe_update
    flags: frozenset[str]
    scenario: str  # the scenario it runs in here: default or noautocreate

    @property
    def number(self) -> str:
        return self.name.split("_", 1)[0]


def parse_test_table(test_c: Path) -> list[tuple[str, frozenset[str], str]]:
    """tests/test.c's `struct test tests[]`: (name, flags, scenario) per _TEST(...) entry."""
    text = test_c.read_text(errors="replace")
    start = text.index("struct test tests[]")
    body = text[start:text.index("\n};", start)]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    entries = []
    for m in re.finditer(r"_TEST\(\s*(\w+)\s*,", body):
        depth, i = 1, m.end()
        while depth and i < len(body):  # the entry's arguments, to its closing parenthesis
            depth += {"(": 1, ")": -1}.get(body[i], 0)
            i += 1
        args = body[m.end():i - 1]
        flags = frozenset(re.findall(r"\bTEST_F_\w+", args))
        scenario = re.search(r'\.scenario\s*=\s*"([^"]*)"', args)
        entries.append((m.group(1), flags, scenario.group(1) if scenario else "default"))
    return entries


def exclusion(name: str, flags: frozenset[str]) -> str | None:
    for flag, why in EXCLUDED_FLAGS.items():
        if flag in flags:
            return why
    if name.endswith("_mock") or "_mock_" in name:
        return "librdkafka's mock cluster only"
    return None


def select_tests(tests_dir: Path) -> tuple[list[SuiteTest], dict[str, str]]:
    """The broker tests (see the module's doc) and, for the others, why they are left out."""
    chosen, left_out = [], {}
    for name, flags, scenario in parse_test_table(tests_dir / "test.c"):
        if name == "0000_unittests":
            left_out[name] = "unit tests"
            continue
        why = exclusion(name, flags)
        if why:
            left_out[name] = why
            continue
        # "default,ak23" runs in the default scenario; only noautocreate needs another broker config
        chosen.append(SuiteTest(name, flags, "noautocreate" if "noautocreate" in scenario.split(",")
                                and "default" not in scenario.split(",") else "default"))
    return chosen, left_out


# -- Kafka's scripts, done with the Admin API --------------------------------------------------------
SHIM = """#!/bin/sh
# Written by kcli's bench/librdkafka_suite.py: Kafka's {script} for librdkafka's tests, through the Admin API.
exec {python} {runner} --shim {script} "$@"
"""


def write_kafka_path(workdir: Path) -> Path:
    kafka = workdir / "kafka"
    (kafka / "bin").mkdir(parents=True, exist_ok=True)
    for script in ("kafka-topics.sh", "kafka-acls.sh"):
        path = kafka / "bin" / script
        path.write_text(SHIM.format(script=script, python=sys.executable, runner=Path(__file__).resolve()))
        path.chmod(0o755)
    return kafka


def _shim_args(argv: list[str]) -> tuple[dict[str, list[str]], set[str]]:
    """--key value / --flag arguments as the Kafka scripts take them."""
    values: dict[str, list[str]] = {}
    flags: set[str] = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            values.setdefault(arg[2:], []).append(argv[i + 1])
            i += 2
        else:
            flags.add(arg.lstrip("-"))
            i += 1
    return values, flags


def shim(script: str, argv: list[str]) -> int:
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       NewPartitions, NewTopic, ResourcePatternType, ResourceType)

    values, flags = _shim_args(argv)
    bootstrap = (values.get("bootstrap-server") or [""])[0]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = (values.get("topic") or [""])[0]
    if script == "kafka-topics.sh":
        if "create" in flags:
            configs = dict(c.split("=", 1) for c in values.get("config", []))
            futures = admin.create_topics([NewTopic(topic, int(values.get("partitions", ["-1"])[0]),
                                                    int(values.get("replication-factor", ["-1"])[0]),
                                                    config=configs)], operation_timeout=30)
        elif "alter" in flags and "partitions" in values:
            futures = admin.create_partitions([NewPartitions(topic, int(values["partitions"][0]))],
                                              operation_timeout=30)
        elif "delete" in flags:
            futures = admin.delete_topics([topic], operation_timeout=30)
        else:
            print(f"{script} stand-in: unsupported arguments {argv}", file=sys.stderr)
            return 2
    elif script == "kafka-acls.sh":
        allow = "allow-principal" in values
        principal = (values.get("allow-principal") or values.get("deny-principal"))[0]
        host = (values.get("allow-host") or values.get("deny-host") or ["*"])[0]
        operation = getattr(AclOperation, values["operation"][0].upper())
        acl = (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, host, operation,
               AclPermissionType.ALLOW if allow else AclPermissionType.DENY)
        if "add" in flags:
            futures = admin.create_acls([AclBinding(*acl)], request_timeout=30)
        else:
            futures = admin.delete_acls([AclBindingFilter(*acl)], request_timeout=30)
    else:
        return 2
    try:
        for future in futures.values():
            future.result()
    except Exception as exc:  # the script's exit status is what the tests check
        print(f"{script} stand-in: {exc}", file=sys.stderr)
        return 1
    return 0


# -- targets -----------------------------------------------------------------------------------------
class Single:
    """One `kctl broker run`, standalone."""

    name = "single"
    brokers = 1

    def __init__(self, workdir: Path, scenario: str) -> None:
        self.dir = workdir / f"single-{scenario}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.scenario = scenario
        self.port = bb.free_port()
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "broker.log"

    @property
    def bootstrap(self) -> str:
        return f"{bb.LOOPBACK}:{self.port}"

    def start(self) -> None:
        overrides = [f"listeners=PLAINTEXT://{bb.LOOPBACK}:{self.port}", f"log.dirs={self.dir / 'logs'}",
                     "broker.rack=RACK0", f"auto.create.topics.enable={str(self.scenario == 'default').lower()}",
                     *TRIVUP_OVERRIDES]
        command = kctl() + ["broker", "run"] + [x for o in overrides for x in ("--override", o)]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=kctl_env(), cwd=self.dir, start_new_session=True)
        bb.wait_listening(self.proc, self.port, 90, self.log)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        bb.stop_process(self.proc, 30)

    def logs(self) -> list[Path]:
        return [self.log]


class Cluster:
    """`kctl cluster run --brokers 3 --racks 3 --rack-prefix RACK`: racks RACK0..RACK2 as trivup names them."""

    name = "cluster"
    brokers = 3

    def __init__(self, workdir: Path, scenario: str) -> None:
        self.dir = workdir / f"cluster-{scenario}"
        self.scenario = scenario
        self.proc: subprocess.Popen | None = None
        self.info: dict | None = None
        self.out = workdir / f"cluster-{scenario}.out"

    @property
    def bootstrap(self) -> str:
        return self.info["bootstrap"]

    def start(self) -> None:
        overrides = [f"auto.create.topics.enable={str(self.scenario == 'default').lower()}", *TRIVUP_OVERRIDES]
        # --start-timeout: on a loaded machine three Python brokers starting at once take a while
        command = kctl() + ["cluster", "run", "--brokers", "3", "--racks", "3", "--rack-prefix", "RACK",
                            "--start-timeout", "300", "--data-dir", str(self.dir), "--json"] + [x for o in overrides for x in ("--override", o)]
        err = open(self.out, "wb")
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                     env=kctl_env(), start_new_session=True)
        err.close()
        deadline = time.monotonic() + 600
        line = b""
        while time.monotonic() < deadline and self.proc.poll() is None:
            ready, _, _ = select.select([self.proc.stdout], [], [], 1)
            if ready:
                line = self.proc.stdout.readline()
                break
        if not line:
            self.stop()
            raise RuntimeError(f"kctl cluster run did not start:\n{bb.tail(self.out, 30)}")
        self.info = json.loads(line)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        bb.stop_process(self.proc, 90)

    def logs(self) -> list[Path]:
        return [self.out] + sorted(self.dir.glob("broker-*/broker.log"))


# -- the secure target: TLS and SASL listeners, an authorizer, the users and files the tests expect ----------
SECURE_USER, SECURE_PASSWORD = "testuser", "testpass"  # trivup's sasl users are myuser/mypassword; any will do
SECURE_KEY_PASSWORD = "client-key-pass"  # ssl.key.password and the client's PKCS#12 password (SSL_password)
# (target, variant, test number, SUBTESTS substring or None): the tests that need security, each against the
# listener and client settings it is written for. 0081 runs only its sub-tests that need an authorizer or SCRAM
# (SUBTESTS is test-runner's substring filter on sub-test names); its other sub-tests are the single target's.
# 0142 creates its topic with replication factor 3: it runs against a secured 3-broker cluster.
SECURE_PLAN = (
    ("secure", "ssl", "0097", None),
    ("secure", "scram", "0135", None),
    ("secure", "scram", "0081", "Acls"),
    ("secure", "scram", "0081", "UserScramCredentials"),
    ("secure", "scram", "0081", "DescribeConsumerGroups"),
    ("secure", "scram", "0081", "DescribeTopics"),
    ("secure", "scram", "0081", "DescribeCluster"),
    # they skip unless security.protocol is plaintext, and need an authorizer (kafka-acls.sh denies User:*)
    ("secure", "plaintext", "0109", None),
    ("secure", "plaintext", "0115", None),
    ("secure", "plaintext", "0119", None),
    ("secure-cluster", "scram", "0142", None),
    ("secure-cluster", "oauthbearer", "0142", None),
)


def make_secure_files(out: Path) -> dict[str, Path]:
    """A test CA, the broker's PEM keystore and a client key and certificate in every encoding 0097 loads (what
    trivup's SslApp makes with openssl and keytool), with Python's cryptography."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    pem, der = serialization.Encoding.PEM, serialization.Encoding.DER

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kctl"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def cert(cn: str, key, issuer, issuer_key, *, ca: bool = False, server: bool = False):
        b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(issuer).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=30))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                                                      if server else [ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        if server:  # clients check the host name (ssl.endpoint.identification.algorithm=https)
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(
                ipaddress.ip_address(bb.LOOPBACK))]), critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    def key_bytes(key, encoding, password: bytes | None = None) -> bytes:
        return key.private_bytes(encoding, serialization.PrivateFormat.PKCS8,
                                 serialization.BestAvailableEncryption(password) if password
                                 else serialization.NoEncryption())

    # RSA, as trivup's: librdkafka's PKCS#12 and DER loaders take any key type, but RSA is what its CI exercises
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = cert("kctl-librdkafka-suite-ca", ca_key, name("kctl-librdkafka-suite-ca"), ca_key, ca=True)
    broker_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    broker = cert("localhost", broker_key, ca.subject, ca_key, server=True)
    client_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    client = cert("client", client_key, ca.subject, ca_key)
    files = {
        "ca": (out / "ca.pem", ca.public_bytes(pem)),
        "ca_der": (out / "ca.der", ca.public_bytes(der)),
        "broker": (out / "broker.pem", key_bytes(broker_key, pem) + broker.public_bytes(pem) + ca.public_bytes(pem)),
        "client_cert": (out / "client.pem", client.public_bytes(pem)),
        "client_cert_der": (out / "client.der", client.public_bytes(der)),
        "client_key": (out / "client.key", key_bytes(client_key, pem, SECURE_KEY_PASSWORD.encode())),
        "client_key_der": (out / "client.key.der", key_bytes(client_key, der)),
        "client_p12": (out / "client.p12", pkcs12.serialize_key_and_certificates(
            b"client", client_key, client, [ca], serialization.BestAvailableEncryption(SECURE_KEY_PASSWORD.encode()))),
    }
    for path, data in files.values():
        path.write_bytes(data)
    return {k: path for k, (path, _) in files.items()}


def ssl_env(files: dict[str, Path]) -> dict[str, str]:
    """The SSL_* variables trivup exports for 0097 (tests/0097-ssl_verify.cpp's envname table)."""
    return {"SSL_pkcs": str(files["client_p12"]), "SSL_password": SECURE_KEY_PASSWORD,
            "SSL_pub_der": str(files["client_cert_der"]), "SSL_pub_pem": str(files["client_cert"]),
            "SSL_priv_der": str(files["client_key_der"]), "SSL_priv_pem": str(files["client_key"]),
            "SSL_ca_der": str(files["ca_der"]), "SSL_all_cas_pem": str(files["ca"]), "SSL_client_auth": "required"}


class Secure(Single):
    """One `kctl broker run` with the listeners librdkafka's security tests need, configured as trivup configures
    Kafka for them (an AclAuthorizer with allow.everyone.if.no.acl.found=true, no super users but OAUTHBEARER's
    admin): SSL with ssl.client.auth=required (0097), SASL_SSL with PLAIN, SCRAM-SHA-256/512 and unsecured
    OAUTHBEARER (0081, 0135), and a PLAINTEXT listener through which the harness sets up the SCRAM user
    (`kctl users set-scram`) and on which 0109, 0115 and 0119 meet the authorizer."""

    name = "secure"
    reauth_ms = 10000  # connections.max.reauth.ms (--reauth-ms)

    def __init__(self, workdir: Path, scenario: str) -> None:
        self.dir = workdir / "secure"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.scenario = scenario
        self.port, self.ssl_port, self.sasl_ssl_port = bb.free_port(), bb.free_port(), bb.free_port()
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "broker.log"
        self.nice = 0
        self.wrap: list[str] = []  # e.g. taskset -c 0
        self.files = make_secure_files(self.dir / "ssl")

    def bootstrap_for(self, variant: str) -> str:
        port = {"ssl": self.ssl_port, "plaintext": self.port}.get(variant, self.sasl_ssl_port)
        return f"{bb.LOOPBACK}:{port}"

    def start(self) -> None:
        plain_jaas = (f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{SECURE_USER}='
                      f'"{SECURE_PASSWORD}";')
        oauth_jaas = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                      'unsecuredLoginStringClaim_sub="admin" unsecuredValidatorRequiredScope="requiredScope";')
        overrides = [
            f"listeners=PLAINTEXT://{bb.LOOPBACK}:{self.port},SSL://{bb.LOOPBACK}:{self.ssl_port},"
            f"SASL_SSL://{bb.LOOPBACK}:{self.sasl_ssl_port}",
            f"log.dirs={self.dir / 'logs'}", "broker.rack=RACK0", "auto.create.topics.enable=true",
            *TRIVUP_OVERRIDES,
            "ssl.keystore.type=PEM", f"ssl.keystore.location={self.files['broker']}",
            "ssl.truststore.type=PEM", f"ssl.truststore.location={self.files['ca']}",
            "listener.name.ssl.ssl.client.auth=required",
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            f"listener.name.sasl_ssl.plain.sasl.jaas.config={plain_jaas}",
            f"listener.name.sasl_ssl.oauthbearer.sasl.jaas.config={oauth_jaas}",
            f"connections.max.reauth.ms={self.reauth_ms}",
            "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found=true", "super.users=User:admin",
        ]
        # as niced as the test-runner, so that neither is favoured (see run_secure on 0097's race)
        command = self.wrap + ["nice", "-n", str(self.nice)] + kctl() + ["broker", "run"] + [
            x for o in overrides for x in ("--override", o)]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=kctl_env(), cwd=self.dir, start_new_session=True)
        bb.wait_listening(self.proc, self.sasl_ssl_port, 90, self.log)
        # the SCRAM user, as trivup adds it after the start (kafka-configs.sh --alter --add-config SCRAM-...)
        setup = subprocess.run(kctl() + ["users", "set-scram", SECURE_USER, "-b", self.bootstrap, "--password-file",
                                         "-", "--iterations", "4096"], input=SECURE_PASSWORD + "\n", text=True,
                               capture_output=True, env=kctl_env(), timeout=120)
        if setup.returncode != 0:
            raise RuntimeError(f"kctl users set-scram {SECURE_USER} failed: {setup.stderr.strip()[-300:]}")

    def test_conf(self, variant: str) -> str:
        ssl = [f"ssl.ca.location={self.files['ca']}", f"ssl.certificate.location={self.files['client_cert']}",
               f"ssl.key.location={self.files['client_key']}", f"ssl.key.password={SECURE_KEY_PASSWORD}"]
        if variant == "ssl":
            return "\n".join(["security.protocol=SSL", *ssl])
        if variant == "plaintext":
            return ""
        sasl = ["security.protocol=SASL_SSL", f"ssl.ca.location={self.files['ca']}"]
        if variant == "scram":
            return "\n".join(sasl + ["sasl.mechanism=SCRAM-SHA-512", f"sasl.username={SECURE_USER}",
                                     f"sasl.password={SECURE_PASSWORD}"])
        return "\n".join(sasl + ["sasl.mechanism=OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt=true",
                                 "sasl.oauthbearer.config=principal=admin scope=requiredScope"])


class SecureCluster(Cluster):
    """`kctl cluster run --security` (SASL_SSL, SCRAM-SHA-512, its test CA, the super user admin) for the tests
    that create topics of replication factor 3 (0142), with connections.max.reauth.ms and unsecured OAUTHBEARER
    (as trivup: unsecuredValidatorRequiredScope) added."""

    name = "secure-cluster"
    reauth_ms = 10000
    files: dict[str, Path] = {}

    def __init__(self, workdir: Path, scenario: str) -> None:
        super().__init__(workdir, scenario)
        self.dir = workdir / "secure-cluster"
        self.out = workdir / "secure-cluster.out"

    def start(self) -> None:
        oauth_jaas = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                      'unsecuredLoginStringClaim_sub="admin" unsecuredValidatorRequiredScope="requiredScope";')
        overrides = ["auto.create.topics.enable=true", *TRIVUP_OVERRIDES,
                     f"connections.max.reauth.ms={self.reauth_ms}",
                     "sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,OAUTHBEARER",
                     f"listener.name.sasl_ssl.oauthbearer.sasl.jaas.config={oauth_jaas}"]
        command = kctl() + ["cluster", "run", "--brokers", "3", "--racks", "3", "--rack-prefix", "RACK", "--security",
                            "--start-timeout", "300", "--data-dir", str(self.dir), "--json"] + [
                                x for o in overrides for x in ("--override", o)]
        err = open(self.out, "wb")
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                     env=kctl_env(), start_new_session=True)
        err.close()
        deadline = time.monotonic() + 600
        line = b""
        while time.monotonic() < deadline and self.proc.poll() is None:
            ready, _, _ = select.select([self.proc.stdout], [], [], 1)
            if ready:
                line = self.proc.stdout.readline()
                break
        if not line:
            self.stop()
            raise RuntimeError(f"kctl cluster run --security did not start:\n{bb.tail(self.out, 30)}")
        self.info = json.loads(line)

    def bootstrap_for(self, variant: str) -> str:
        return self.bootstrap

    def test_conf(self, variant: str) -> str:
        sec = self.info["security"]
        sasl = [f"security.protocol={sec['protocol']}", f"ssl.ca.location={sec['ca']}"]
        if variant == "scram":
            return "\n".join(sasl + [f"sasl.mechanism={sec['mechanism']}", f"sasl.username={sec['user']}",
                                     f"sasl.password={sec['password']}"])
        return "\n".join(sasl + ["sasl.mechanism=OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt=true",
                                 "sasl.oauthbearer.config=principal=admin scope=requiredScope"])


def run_secure(tests: list[SuiteTest], tests_dir: Path, workdir: Path, out: Path, args) -> dict[str, dict[str, Result]]:
    """SECURE_PLAN's runs: against one Secure broker, then a SecureCluster; a column per target and variant
    ("secure-ssl", "secure-cluster-scram", ...); a run of part of a test is named <test>[<SUBTESTS>]."""
    by_number: dict[str, list[str]] = {}
    for t in tests:
        by_number.setdefault(t.number, []).append(t.name)
    results: dict[str, dict[str, Result]] = {}
    cpus = sorted(os.sched_getaffinity(0))
    pin = len(cpus) >= 2 and shutil.which("taskset") is not None and not args.no_pin
    kafka_path = write_kafka_path(workdir)
    for kind in (Secure, SecureCluster):
        plan = [(v, n, sub) for k, v, n, sub in SECURE_PLAN if k == kind.name and n in by_number]
        if not plan:
            continue
        for v, _, _ in plan:
            results.setdefault(f"{kind.name}-{v}", {})
        target = kind(workdir, "default")
        # connections.max.reauth.ms: 0142 reads it through DescribeConfigs, re-authenticates at 90% of it and
        # produces for 1.2 times it per sub-test
        target.reauth_ms = args.reauth_ms
        client_wrap: list[str] = []
        if kind is Secure:
            target.nice = args.nice
            if pin:
                # the broker and test-runner on different CPUs: librdkafka (2.12.0, rd_kafka_transport_ssl_connect)
                # reports a TLS handshake that fails within its first SSL_connect() call as a transport failure
                # instead of _SSL, and 0097 fails on that. That happens when the client is preempted between sending
                # its ClientHello and reading, and the broker's whole first flight is there when it reads: on a
                # loaded machine, both on one CPU, in 2 of 3 runs here; pinned apart, in none of 4 (load 10-17, 2 cores)
                target.wrap = ["taskset", "-c", str(cpus[0])]
                client_wrap = ["taskset", "-c", str(cpus[-1])]
        print(f"[{kind.name}] starting ...", flush=True)
        try:
            target.start()
        except Exception as exc:
            print(f"[{kind.name}] !! did not start: {exc}", flush=True)
            for v, n, sub in plan:
                for name in by_number[n]:
                    results[f"{kind.name}-{v}"][f"{name}[{sub}]" if sub else name] = Result(
                        "fail", 0.0, f"target did not start: {str(exc)[:200]}")
            target.stop()
            continue
        logdir = out / kind.name
        logdir.mkdir(parents=True, exist_ok=True)
        try:
            for variant, number, sub in plan:
                column = f"{kind.name}-{variant}"
                conf = workdir / f"{column}-test.conf"
                conf.write_text(f"bootstrap.servers={target.bootstrap_for(variant)}\n"
                                f"test.timeout.multiplier={args.timeout_multiplier}\ntest.topic.random=true\n"
                                f"{target.test_conf(variant)}\n" + "".join(f"{c}\n" for c in args.client_conf))
                env = dict(os.environ, TEST_KAFKA_VERSION=KAFKA_VERSION, BROKERS=target.bootstrap_for(variant),
                           KAFKA_PATH=str(kafka_path), **(ssl_env(target.files) if target.files else {}),
                           LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(tests_dir.parent / "src"),
                                                                         str(tests_dir.parent / "src-cpp"),
                                                                         os.environ.get("LD_LIBRARY_PATH")])))
                env.pop("CI", None)
                job = Job(number, "default", list(by_number[number]), subtests=sub,
                          label=f"{variant}{'-' + sub if sub else ''}", wrap=client_wrap)
                # the logs are kept: which sub-tests ran and which skipped is only in them
                for name, r in sorted(run_job(job, tests_dir, conf, env, args.timeout, args.quick, logdir,
                                              args.nice, keep=True).items()):
                    key = f"{name}[{sub}]" if sub else name
                    results[column][key] = r
                    print(f"[{column}] {key:<48} {r.state:<7} {r.seconds:7.1f}s  {r.reason[:90]}", flush=True)
                if not target.alive():
                    print(f"[{kind.name}] !! the target exited (after {number} {variant})", flush=True)
                    break
        finally:
            target.stop()
            for log in target.logs():
                if log.exists():
                    shutil.copy2(log, logdir / f"{log.parent.name}-{log.name}")
    return results


def kctl() -> list[str]:
    exe = Path(sys.executable).parent / "kctl"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "kcli"]


def kctl_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


# -- running -------------------------------------------------------------------------------------------
@dataclass
class Result:
    state: str  # pass, fail, skip, timeout
    seconds: float = 0.0
    reason: str = ""
    log: str | None = None


@dataclass
class Job:
    number: str
    scenario: str
    names: list[str] = field(default_factory=list)
    subtests: str | None = None  # test-runner's SUBTESTS: only the sub-tests whose name holds this
    label: str | None = None  # in log file names instead of the scenario
    wrap: list[str] = field(default_factory=list)  # a command prefix for test-runner, e.g. taskset -c 1


def failure_reason(output: str, name: str) -> str:
    """The first failure message the test-runner printed for `name` (its `### Test ... failed at ...` block)."""
    m = re.search(r"### Test \"" + re.escape(name) + r"[^\n]*failed at ([^\n]*)\n\s*([^\n]*)", output)
    if m:
        return f"{m.group(2).strip()} ({m.group(1).split(' at ')[0].strip()})"
    m = re.search(r"TEST FAILURE[^\n]*\n[^\n]*" + re.escape(name) + r"[^\n]*\n\s*([^\n]*)", output)
    return m.group(1).strip() if m else ""


def run_job(job: Job, tests_dir: Path, conf: Path, env: dict[str, str], timeout: float, quick: bool,
            logdir: Path, nice: int, keep: bool = False) -> dict[str, Result]:
    log = logdir / f"{job.number}-{job.label or job.scenario}.log"
    report = logdir / f"{job.number}-{job.label or job.scenario}.json"
    command = job.wrap + ["nice", "-n", str(nice), "./test-runner", "-L", "-E", "-p1", "-s", job.scenario]
    if quick:
        command.append("-Q")
    run_env = dict(env, TESTS=job.number, TEST_REPORT=str(report), RDKAFKA_TEST_CONF=str(conf),
                   TEST_SCENARIO=job.scenario)
    if job.subtests:
        run_env["SUBTESTS"] = job.subtests
    started = time.monotonic()
    timed_out = False
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=tests_dir, env=run_env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the test-runner and its children only
            proc.wait()
    elapsed = time.monotonic() - started
    output = ANSI.sub("", log.read_text(errors="replace"))
    results: dict[str, Result] = {}
    for line in output.splitlines():
        m = SUMMARY_LINE.match(line.strip())
        if m and m.group(1) in job.names:
            # the summary's durations are often 0.000s: the process's wall time is shown instead
            results[m.group(1)] = Result(STATES[m.group(2)], float(m.group(3)) or elapsed, m.group(4).strip())
    for name in job.names:
        r = results.get(name)
        if r is None:
            state = "timeout" if timed_out else "fail"
            why = f"no result after {elapsed:.0f}s (killed)" if timed_out else f"no result (exit {proc.returncode})"
            results[name] = r = Result(state, elapsed, failure_reason(output, name) or why)
        elif r.state == "fail":
            r.reason = failure_reason(output, name) or r.reason
    if keep or any(r.state in ("fail", "timeout") for r in results.values()):
        for r in results.values():
            r.log = str(log)
    else:
        log.unlink(missing_ok=True)
    report.unlink(missing_ok=True)
    return results


def run_target(kind: type, jobs: list[Job], tests_dir: Path, workdir: Path, out: Path, args) -> dict[str, Result]:
    results: dict[str, Result] = {}
    kafka_path = write_kafka_path(workdir)
    for scenario in SCENARIOS:
        todo = [j for j in jobs if j.scenario == scenario]
        if not todo:
            continue
        target = kind(workdir, scenario)
        print(f"[{kind.name}/{scenario}] starting ...", flush=True)
        try:
            target.start()
        except Exception as exc:  # its tests count as failed; the other scenario and target still run
            print(f"[{kind.name}/{scenario}] !! did not start: {exc}", flush=True)
            for job in todo:
                for name in job.names:
                    results[name] = Result("fail", 0.0, f"target did not start: {str(exc)[:200]}")
            continue
        logdir = out / kind.name
        logdir.mkdir(parents=True, exist_ok=True)
        conf = workdir / f"{kind.name}-{scenario}-test.conf"
        conf.write_text(f"bootstrap.servers={target.bootstrap}\ntest.timeout.multiplier={args.timeout_multiplier}\n"
                        "test.topic.random=true\n")
        env = dict(os.environ, TEST_KAFKA_VERSION=KAFKA_VERSION, BROKERS=target.bootstrap, KAFKA_PATH=str(kafka_path),
                   LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(tests_dir.parent / "src"),
                                                                 str(tests_dir.parent / "src-cpp"),
                                                                 os.environ.get("LD_LIBRARY_PATH")])))
        env.pop("CI", None)  # CI=... makes test-runner shorten timeouts and cap concurrency
        print(f"[{kind.name}/{scenario}] {target.bootstrap}: {sum(len(j.names) for j in todo)} tests in "
              f"{len(todo)} processes, {args.jobs} at a time", flush=True)
        lock = threading.Lock()
        try:
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                futures = {pool.submit(run_job, j, tests_dir, conf, env, args.timeout, args.quick, logdir,
                                       args.nice): j for j in todo}
                for future in concurrent.futures.as_completed(futures):
                    job = futures[future]
                    with lock:
                        for name, r in sorted(future.result().items()):
                            results[name] = r
                            print(f"[{kind.name}] {name:<48} {r.state:<7} {r.seconds:7.1f}s  {r.reason[:90]}",
                                  flush=True)
                        if not target.alive():
                            print(f"[{kind.name}] !! the target exited (after {job.number})", flush=True)
        finally:
            target.stop()
            for log in target.logs():
                if log.exists():
                    shutil.copy2(log, logdir / f"{scenario}-{log.parent.name}-{log.name}")
    return results


def print_table(tests: list[SuiteTest], results: dict[str, dict[str, Result]]) -> None:
    targets = list(results)
    names = [t.name for t in tests]
    names += sorted({n for k in targets for n in results[k]} - set(names))  # the secure target's part-runs
    width = max(48, *(len(n) + 2 for n in names))
    print("\n" + f"{'test':<{width}}" + "".join(f"{t:<18}" for t in targets))
    for n in names:
        if any(n in results[k] for k in targets):
            print(f"{n:<{width}}" + "".join(f"{results[k].get(n, Result('-')).state:<18}" for k in targets))
    print()
    for k in targets:
        counts = {s: sum(1 for r in results[k].values() if r.state == s) for s in ("pass", "fail", "timeout", "skip")}
        print(f"{k}: {counts['pass']} pass, {counts['fail']} fail, {counts['timeout']} timeout, {counts['skip']} "
              f"skip, of {len(results[k])}")
        for name, r in sorted(results[k].items()):
            if r.state in ("fail", "timeout"):
                print(f"  {name}: {r.state}: {r.reason[:160]}  [{r.log}]")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", default="single,cluster,secure", help="single, cluster, secure (comma-separated)")
    ap.add_argument("--tests", help="only these test numbers (comma-separated, e.g. 0001,0045)")
    ap.add_argument("--jobs", type=int, default=2, help="test-runner processes at a time")
    ap.add_argument("--timeout", type=float, default=900, help="seconds at most for one test-runner process")
    ap.add_argument("--timeout-multiplier", type=float, default=2.0, help="test.timeout.multiplier in test.conf")
    ap.add_argument("--quick", action="store_true", help="test-runner -Q, as librdkafka's CI runs: skips every "
                    "sub-test not marked quick (0045_subscribe_update then does nothing and passes)")
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--reauth-ms", type=int, default=10000, help="secure targets: connections.max.reauth.ms "
                    "(0142 re-authenticates at 90%% of it; librdkafka's CI uses 10000)")
    ap.add_argument("--client-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="secure targets: one more line of test.conf (every client the tests make), for diagnosis")
    ap.add_argument("--no-pin", action="store_true", help="secure target: do not pin the broker and test-runner "
                    "to different CPUs (see run_secure: a race in librdkafka's TLS error reporting fails 0097)")
    ap.add_argument("--librdkafka-src", type=Path, help="build from this librdkafka source tree (default: the "
                    "release node-rdkafka bundles, with npm pack)")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--list", action="store_true", help="list the selected tests and those left out, and why")
    ap.add_argument("--out", type=Path, help="where logs and results.json go")
    if sys.argv[1:2] == ["--shim"]:  # a stand-in for one of Kafka's scripts: the rest are that script's arguments
        return shim(sys.argv[2], sys.argv[3:])
    args = ap.parse_args()

    tests_dir = build_suite(args.librdkafka_src)
    if args.build_only:
        print(tests_dir / "test-runner")
        return 0
    tests, left_out = select_tests(tests_dir)
    if args.tests:
        wanted = set(args.tests.split(","))
        tests = [t for t in tests if t.number in wanted or t.name in wanted]
    if args.list:
        for t in tests:
            print(f"{t.name:<48} {t.scenario}")
        print(f"{len(tests)} selected; left out:")
        for name, why in left_out.items():
            print(f"  {name:<46} {why}")
        return 0
    jobs: dict[tuple[str, str], Job] = {}
    for t in tests:
        jobs.setdefault((t.number, t.scenario), Job(t.number, t.scenario)).names.append(t.name)
    out = (args.out or br.cache_root() / "librdkafka-suite-runs" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for sig in (signal.SIGTERM, signal.SIGHUP):  # the finally blocks must still stop the brokers
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))
    kinds = {"single": Single, "cluster": Cluster}
    unknown = set(args.targets.split(",")) - set(kinds) - {"secure"}
    if unknown:
        ap.error(f"unknown targets: {', '.join(sorted(unknown))}")
    results: dict[str, dict[str, Result]] = {}
    workdir = Path(tempfile.mkdtemp(prefix="kcli-librdkafka-suite-"))
    print(f"librdkafka tests in {tests_dir}; {len(tests)} tests; output in {out}; workdir {workdir}", flush=True)
    try:
        for name in args.targets.split(","):
            if name == "secure":
                results.update(run_secure(tests, tests_dir, workdir, out, args))
                (out / "results.json").write_text(json.dumps(
                    {k: {n: vars(r) for n, r in v.items()} for k, v in results.items()}, indent=1))
                continue
            try:
                results[name] = run_target(kinds[name], sorted(jobs.values(), key=lambda j: j.number), tests_dir,
                                           workdir, out, args)
            except Exception as exc:  # a target that would not start: its tests count as failed, the next runs
                print(f"[{name}] !! {exc}", flush=True)
                results[name] = {t.name: Result("fail", 0.0, f"target did not start: {str(exc)[:200]}")
                                 for t in tests}
            (out / "results.json").write_text(json.dumps(
                {k: {n: vars(r) for n, r in v.items()} for k, v in results.items()}, indent=1))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print_table(tests, results)
    print(f"\nlogs and results.json in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
