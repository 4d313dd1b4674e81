"""A client's security settings from a properties file and ``key=value`` overrides (Kafka's tools'
``--command-config``, kcat's ``-X``/``-F``), checked before any connection: the TLS files are loaded once here so
a wrong path or password is a settings error, not a failed connection."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kcli.errors import KcliError
from kcli.protocol.security import ClientSecurity, SecurityConfigError
from kcli.storage.checkpoint import parse_java_properties


def read_client_properties(config_file: str | Path | None, overrides: Iterable[str] = ()) -> dict[str, str]:
    """The file's properties (Java properties syntax), then each ``key=value`` override on top."""
    props: dict[str, str] = {}
    if config_file is not None:
        try:
            data = Path(config_file).read_bytes()
        except OSError as exc:
            raise SecurityConfigError(f"cannot read the client config file: {exc.strerror or exc}",
                                      path=str(config_file)) from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("latin-1")  # java.util.Properties' own encoding
        props.update(parse_java_properties(text))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SecurityConfigError(f"-X expects key=value, got {item!r}")
        props[key.strip()] = value
    return props


def load_client_security(config_file: str | Path | None = None, overrides: Iterable[str] = ()) -> ClientSecurity:
    """ClientSecurity from ``--command-config`` and ``-X``; raises SecurityConfigError (a usage error)."""
    security = ClientSecurity.from_properties(read_client_properties(config_file, overrides))
    if security.protocol.tls:
        from kcli.tls import client_ssl_context

        try:
            client_ssl_context(security.ssl)  # the files exist, the key opens, the password is right
        except KcliError as exc:  # kcli.tls.TlsConfigError
            raise SecurityConfigError(exc.reason, path=exc.path) from None
    return security
