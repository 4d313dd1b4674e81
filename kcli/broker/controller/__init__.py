"""The ZooKeeper-mode controller: KafkaController, its state machines and channel manager, and ControllerRunner,
which runs it beside a broker's BrokerRegistration (kafka-cluster.md sections 2, 3 and 5)."""

from __future__ import annotations

from kcli.broker.controller.controller import BrokerNotAvailableError, KafkaController, StaleBrokerEpochError
from kcli.broker.controller.runner import ControllerRunner

__all__ = ["BrokerNotAvailableError", "ControllerRunner", "KafkaController", "StaleBrokerEpochError"]
