"""A pykafka 2.8 BalancedConsumer as a group member process, for tests/client/test_zk_consumer_cluster.py.

Run by the pykafka environment's interpreter (pykafka pins kazoo 2.5, kcli needs 2.10+: scripts/setup.sh makes
.venv-pykafka apart). Prints "<partition> <offset> <value>" per message, flushed, and commits after printing.
Usage: pykafka_member.py HOSTS ZOOKEEPER GROUP TOPIC SESSION_MS
"""

import sys

from pykafka import KafkaClient
from pykafka.common import OffsetType


def main() -> None:
    hosts, zookeeper, group, topic, session_ms = sys.argv[1:6]
    client = KafkaClient(hosts=hosts, broker_version="0.10.0")
    consumer = client.topics[topic].get_balanced_consumer(
        consumer_group=group.encode(), zookeeper_connect=zookeeper, auto_commit_enable=False,
        auto_offset_reset=OffsetType.EARLIEST, reset_offset_on_start=False, rebalance_backoff_ms=500,
        rebalance_max_retries=20, zookeeper_connection_timeout_ms=int(session_ms), consumer_timeout_ms=200,
        use_rdkafka=False)
    print("ready", flush=True, file=sys.stderr)
    try:
        while True:
            message = consumer.consume(block=True)
            if message is None:
                continue
            sys.stdout.write(f"{message.partition_id} {message.offset} {message.value.decode()}\n")
            sys.stdout.flush()
            consumer.commit_offsets()  # after processing: at-least-once, nothing skipped
    except KeyboardInterrupt:
        pass
    finally:
        consumer.stop()


if __name__ == "__main__":
    main()
