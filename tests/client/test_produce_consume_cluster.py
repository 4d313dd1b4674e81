"""kctl produce and kctl consume across a leader change on a real three-broker cluster: a following consumer
loses its leader (a lost connection, then a metadata refresh) and goes on at the new one; a producer started
after the change finds the new leader past a stopped bootstrap server; confluent-kafka reads back every record
once, in order."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cluster_support import create_topic, metadata, read_assigned, running_cluster, wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with running_cluster(zookeeper, tmp_path_factory.mktemp("produce-consume-cluster")) as c:
        yield c


def kctl(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kcli", *args], input=input, capture_output=True, timeout=300)


def test_produce_and_consume_follow_the_leader(cluster):
    topic = create_topic(cluster, "moving", partitions=1, rf=3)
    first = topic.partitions[0].leader
    follower = subprocess.Popen([sys.executable, "-m", "kcli", "consume", "moving", "-b", cluster.bootstrap,
                                 "-c", "40", "-f", "%o:%s\\n"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        done = kctl("produce", "moving", "-b", cluster.bootstrap, "--idempotent",
                    input=b"".join(b"a%d\n" % i for i in range(20)))
        assert done.returncode == 0, done.stderr
        cluster.brokers[first].stop()  # SIGTERM: a controlled shutdown moves the leadership
        wait_for(lambda: metadata(cluster, "moving").topics["moving"].partitions[0].leader not in (-1, first), 60,
                 "a new leader")
        done = kctl("produce", "moving", "-b", cluster.bootstrap, "-z", "lz4",
                    input=b"".join(b"b%d\n" % i for i in range(20)))
        assert done.returncode == 0, done.stderr
        out, err = follower.communicate(timeout=180)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    expected = [f"{i}:a{i}" for i in range(20)] + [f"{i + 20}:b{i}" for i in range(20)]
    assert out.decode().splitlines() == expected
    assert [(m.offset(), m.value()) for m in read_assigned(cluster, "moving", 40)] == [
        (i, e.split(":")[1].encode()) for i, e in enumerate(expected)]
