"""ConfigError, apart from kcli.broker.config so that the modules config validation calls (kcli.broker.security's
listener settings) can raise it without importing the config module back."""

from __future__ import annotations

from kcli.errors import KcliError


class ConfigError(KcliError):
    """A configuration value Kafka would refuse."""
