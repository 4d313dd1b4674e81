"""kcli: the operations toolkit for Kafka-style logs (the ``kctl`` command)."""

__version__ = "0.1.0"
