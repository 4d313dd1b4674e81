"""`kctl consume --zookeeper ZK --group G TOPIC...`: kctl as a member of a ZooKeeper-era consumer group.

Thin: kcli.zk.consumer_group is the member's ZooKeeper side, kcli.client.zk_consumer runs the group protocol and
fetches; records are printed as `kctl consume` prints them (-f, -K, --json). kcli/cli/consume.py declares the
options below and hands over to ``consume_zookeeper`` when --zookeeper is given.
"""

from __future__ import annotations

import signal
from typing import Annotated, Any, Optional

import typer

from kcli.cli.common import ExitCode, client_security, err_console, fail

ZookeeperConsumeOpt = Annotated[Optional[str], typer.Option(
    "--zookeeper", metavar="HOST:PORT[/CHROOT]", show_default=False,  # no $KCTL_ZOOKEEPER: never implied
    help="Join consumer group -G as a ZooKeeper-era consumer (Kafka 0.8's ZookeeperConsumerConnector): register "
    "under /consumers/GROUP/ids, rebalance with the other members (range or round-robin), own partitions through "
    "/consumers/GROUP/owners, commit to /consumers/GROUP/offsets (or Kafka). The brokers come from ZooKeeper.")]
WhitelistOpt = Annotated[Optional[str], typer.Option(
    "--whitelist", metavar="REGEX", show_default=False,
    help="With --zookeeper: subscribe to every topic matching REGEX (',' means '|'), now and later.")]
BlacklistOpt = Annotated[Optional[str], typer.Option(
    "--blacklist", metavar="REGEX", show_default=False,
    help="With --zookeeper: subscribe to every topic not matching REGEX.")]
StreamsOpt = Annotated[int, typer.Option(
    "--streams", min=1, help="With --zookeeper: consumer threads (streams) to register per topic; each owns its "
    "share of the partitions.")]
ConsumerPropertyOpt = Annotated[Optional[list[str]], typer.Option(
    "--consumer-property", metavar="KEY=VALUE", show_default=False,
    help="With --zookeeper: an old consumer setting (repeatable): partition.assignment.strategy (range, "
    "roundrobin), rebalance.max.retries, rebalance.backoff.ms, zookeeper.session.timeout.ms, offsets.storage "
    "(zookeeper, kafka), dual.commit.enabled, auto.commit.enable, auto.commit.interval.ms, consumer.timeout.ms, "
    "auto.offset.reset (smallest, largest), consumer.id, fetch.message.max.bytes, fetch.wait.max.ms.")]


def consume_zookeeper(zookeeper: str, group: str | None, topics: list[str], *, whitelist: str | None,
                      blacklist: str | None, streams: int, properties: list[str], start_kind: str | None,
                      printer: Any, timeout: float) -> None:
    """Run one member until Ctrl-C, -c N records (``printer``: kcli.cli.consume's), or consumer.timeout.ms
    without a record."""
    from kcli.client import KafkaClient
    from kcli.client.zk_consumer import Rebalanced, ZookeeperConsumer, default_client_id, parse_properties
    from kcli.client.consume import ConsumeNotice
    from kcli.errors import UsageError
    from kcli.records import old_consumer as oc
    from kcli.zk.consumer_group import ZkGroupMember

    if not group:
        raise fail("--zookeeper needs a group: -G GROUP", ExitCode.USAGE)
    if (whitelist is not None) + (blacklist is not None) + bool(topics) != 1:
        raise fail("--zookeeper: give topics, or --whitelist REGEX, or --blacklist REGEX (one of them)",
                   ExitCode.USAGE)
    try:
        config = parse_properties(group, properties)
    except UsageError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None
    if start_kind == "end":
        config.auto_offset_reset = "largest"
    elif start_kind == "beginning":
        config.auto_offset_reset = "smallest"
    if whitelist is not None or blacklist is not None:
        pattern = oc.WHITE_LIST if whitelist is not None else oc.BLACK_LIST
        subscription = {whitelist if whitelist is not None else blacklist: streams}  # type: ignore[dict-item]
    else:
        pattern, subscription = oc.STATIC, {t: streams for t in topics}
    registry = ZkGroupMember(zookeeper, group, session_timeout_s=config.zookeeper_session_timeout_ms / 1000)
    try:
        client = KafkaClient(registry.bootstrap(), timeout=timeout, client_id=default_client_id(),
                             security=client_security())
    except BaseException:
        registry.close()
        raise
    try:
        consumer = ZookeeperConsumer(client, registry, config, subscription, pattern)
    except UsageError as exc:
        client.close()
        registry.close()
        raise fail(exc.describe(), ExitCode.USAGE) from None
    signal.signal(signal.SIGTERM, _interrupt)  # a stopped member commits and leaves the group, as at Ctrl-C
    try:
        try:
            consumer.start()
            err_console.print(f"kctl: joined group {group} as {consumer.consumer_id}", markup=False)
            for item in consumer.items():
                if isinstance(item, ConsumeNotice):
                    err_console.print(f"kctl: {item.text}", markup=False)
                    continue
                if isinstance(item, Rebalanced):
                    owned = ", ".join(f"{t}-{p}" for t, p in sorted(item.partitions)) or "no partitions"
                    err_console.print(f"kctl: rebalanced: {consumer.consumer_id} owns {owned}", markup=False)
                    continue
                position = printer.write(item)
                printer.out.flush()  # printed before it counts as processed: a commit never runs ahead of output
                if printer.done:
                    consumer.mark(item.topic, item.partition, position)
                    break
        except KeyboardInterrupt:
            client.close()  # a fetch may have been cut mid-answer: new connections for the last commit
        finally:
            try:
                printer.out.flush()
            finally:
                consumer.close()
    finally:
        client.close()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
