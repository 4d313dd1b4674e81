"""kctl elect-leaders, topics add-partitions/alter, reassign and configs against a real three-broker cluster
(`kctl broker run` processes on the session's ZooKeeper), checked in ZooKeeper's partition state and with
confluent-kafka's AdminClient. One cluster for the module; each test uses its own topics."""

from __future__ import annotations

import json
import signal

import pytest
from typer.testing import CliRunner

from cluster_support import consume_all, create_topic, metadata, produce, running_cluster, wait_for
from kcli.cli.app import app

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    # No automatic rebalance: the preferred elections asked for here are the only ones.
    with running_cluster(zookeeper, tmp_path_factory.mktemp("admin"),
                         extra=("auto.leader.rebalance.enable=false",)) as c:
        yield c


def kctl(cluster, *args: str, code: int | None = 0, bootstrap: str | None = None):
    result = CliRunner().invoke(app, [*args, "-b", bootstrap or cluster.bootstrap], env={"COLUMNS": "200"})
    assert code is None or result.exit_code == code, f"exit {result.exit_code}\n{result.output}"
    return result


def reorder_in_zookeeper(cluster, topic: str, partition: int, replicas: list[int]) -> None:
    """A reassignment to the same replicas in another order (the legacy /admin/reassign_partitions node): the
    leader stays where it is, and the preferred replica is now another broker."""
    node = cluster.chroot + "/admin/reassign_partitions"
    cluster.zk.create(node, json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": partition, "replicas": replicas}]}).encode())
    wait_for(lambda: not cluster.zk.exists(node), 30, "the reassignment node deleted")
    wait_for(lambda: cluster.read_json(f"/brokers/topics/{topic}")["partitions"][str(partition)] == replicas, 30,
             "the new replica order in ZooKeeper")


# -- elect-leaders ---------------------------------------------------------------------------------------
def test_elect_leaders_preferred(cluster, tmp_path):
    create_topic(cluster, "elect", assignment=[[1, 0, 2], [2, 0, 1]])
    assert cluster.state("elect", 0)["leader"] == 1
    reorder_in_zookeeper(cluster, "elect", 0, [0, 1, 2])
    before = cluster.state("elect", 0)
    assert before["leader"] == 1  # not the preferred replica (0) any more

    out = kctl(cluster, "elect-leaders", "--election-type", "PREFERRED", "--topic", "elect").stdout
    assert out == ("Successfully completed leader election (PREFERRED) for partitions elect-0\n"
                   "Valid replica already elected for partitions elect-1\n")
    after = cluster.state("elect", 0)
    assert (after["leader"], after["leader_epoch"]) == (0, before["leader_epoch"] + 1)
    wait_for(lambda: metadata(cluster, "elect").topics["elect"].partitions[0].leader == 0, 30,
             "Metadata naming broker 0")

    # Nothing left to do: one partition, the JSON form, --json
    again = json.loads(kctl(cluster, "elect-leaders", "--topic", "elect", "--partition", "0", "--json").stdout)
    assert again == {"election_type": "PREFERRED", "results": [
        {"topic": "elect", "partition": 0, "outcome": "not_needed", "error": "ELECTION_NOT_NEEDED (84)",
         "message": again["results"][0]["message"]}]}
    plan = tmp_path / "elect.json"
    plan.write_text(json.dumps({"partitions": [{"topic": "elect", "partition": 1}]}))
    out = kctl(cluster, "elect-leaders", "--election-type", "unclean", "--path-to-json-file", str(plan)).stdout
    assert out == "Valid replica already elected for partitions elect-1\n"


def test_elect_leaders_failures_and_usage(cluster, tmp_path):
    create_topic(cluster, "elect-bad", partitions=1, rf=3)
    result = kctl(cluster, "elect-leaders", "--topic", "elect-bad", "--partition", "7", code=1)
    assert "Error completing leader election (PREFERRED) for partition: elect-bad-7: UNKNOWN_TOPIC_OR_PARTITION (3)" \
        in result.stdout
    assert "1 replica(s) could not be elected" in result.output
    # every partition: the ones already led by their preferred replica are left out, as Kafka leaves them out
    doc = json.loads(kctl(cluster, "elect-leaders", "--all-topic-partitions", "--json").stdout)
    assert all(r["outcome"] == "elected" for r in doc["results"]), doc
    assert kctl(cluster, "elect-leaders", "--all-topic-partitions").stdout == ""

    assert "give one of" in kctl(cluster, "elect-leaders", code=2).output
    assert "not several" in kctl(cluster, "elect-leaders", "--topic", "t", "--all-topic-partitions", code=2).output
    assert "--partition needs --topic" in kctl(cluster, "elect-leaders", "--all-topic-partitions", "--partition",
                                                "0", code=2).output
    assert kctl(cluster, "elect-leaders", "--election-type", "random", "--all-topic-partitions", code=2)
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps({"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}))
    assert "duplicate partitions: t-0" in kctl(cluster, "elect-leaders", "--path-to-json-file", str(dup),
                                               code=2).output
    assert "No such file" in kctl(cluster, "elect-leaders", "--path-to-json-file", str(tmp_path / "nope.json"),
                                  code=3).output
    unknown = kctl(cluster, "elect-leaders", "--topic", "no-such-topic", code=1).output
    assert "no-such-topic" in unknown and "UNKNOWN_TOPIC_OR_PARTITION" in unknown


# -- topics add-partitions / alter -----------------------------------------------------------------------
def partition_count(cluster, topic: str) -> int:
    return len(cluster.read_json(f"/brokers/topics/{topic}")["partitions"])


def test_add_partitions(cluster):
    create_topic(cluster, "grow", partitions=2, rf=2)
    out = kctl(cluster, "topics", "add-partitions", "grow", "--partitions", "4").stdout
    assert out == "Increased the partitions of topic grow from 2 to 4.\n"
    assert partition_count(cluster, "grow") == 4
    wait_for(lambda: all(p.leader >= 0 for p in metadata(cluster, "grow").topics["grow"].partitions.values())
             and len(metadata(cluster, "grow").topics["grow"].partitions) == 4, 60, "4 partitions with leaders")

    # kafka-topics' --alter spelling, and the new partitions' replicas given (only the new ones here)
    doc = json.loads(kctl(cluster, "topics", "alter", "grow", "--partitions", "6", "--replica-assignment", "0:1,1:2",
                          "--json").stdout)
    assert doc == {"results": [{"topic": "grow", "action": "partitions", "ok": True, "error": None,
                                "partitions": 6, "previous_partitions": 4}]}
    assigned = cluster.read_json("/brokers/topics/grow")["partitions"]
    assert (assigned["4"], assigned["5"]) == ([0, 1], [1, 2])

    out = kctl(cluster, "topics", "add-partitions", "grow", "--partitions", "8", "--validate-only").stdout
    assert "from 6 to 8" in out and "validate only" in out
    assert partition_count(cluster, "grow") == 6

    fewer = kctl(cluster, "topics", "add-partitions", "grow", "--partitions", "3", code=2).output
    assert "The number of partitions for a topic can only be increased" in fewer and "grow has 6" in fewer
    same = kctl(cluster, "topics", "alter", "grow", "--partitions", "6", code=1).output
    assert "results[grow].error_code = INVALID_PARTITIONS (37)" in same
    assert "no-such-topic" in kctl(cluster, "topics", "add-partitions", "no-such-topic", "--partitions", "2",
                                   code=1).output
    bad = kctl(cluster, "topics", "add-partitions", "grow", "--partitions", "8", "--replica-assignment", "0:1",
               code=2).output
    assert "give all 8 or the 2 new ones" in bad
    assert partition_count(cluster, "grow") == 6
