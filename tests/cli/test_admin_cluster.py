"""kctl elect-leaders, topics add-partitions/alter, reassign and configs against a real three-broker cluster
(`kctl broker run` processes on the session's ZooKeeper), checked in ZooKeeper's partition state and with
confluent-kafka's AdminClient. One cluster for the module; each test uses its own topics."""

from __future__ import annotations

import json
import signal
import time

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

    # kafka-topics.sh's own command line
    out = kctl(cluster, "topics", "--alter", "--topic", "grow", "--partitions", "7").stdout
    assert out == "Increased the partitions of topic grow from 6 to 7.\n"
    described = kctl(cluster, "topics", "--describe", "--topic", "grow").stdout.splitlines()
    assert "PartitionCount: 7" in described[0] and len(described) == 8


# -- reassign ------------------------------------------------------------------------------------------
def assignment(cluster, topic: str) -> dict[int, list[int]]:
    return {int(p): r for p, r in cluster.read_json(f"/brokers/topics/{topic}")["partitions"].items()}


def write_plan(path, partitions: dict[tuple[str, int], list[int]], log_dirs=None) -> str:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, **({"log_dirs": log_dirs} if log_dirs else {})}
        for (t, p), r in partitions.items()]}))
    return str(path)


def test_reassign_generate_execute_verify(cluster, tmp_path):
    create_topic(cluster, "move", assignment=[[0, 1], [1, 2], [2, 0]])
    produce(cluster, "move", 60)
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "move"}]}))

    out = kctl(cluster, "reassign", "--generate", "--topics-to-move-json-file", str(topics), "--broker-list",
               "0,1,2").stdout.split("\n")
    assert out[0] == "Current partition replica assignment" and out[3] == "Proposed partition reassignment configuration"
    assert json.loads(out[1]) == {"version": 1, "partitions": [
        {"topic": "move", "partition": p, "replicas": r, "log_dirs": ["any", "any"]}
        for p, r in sorted(assignment(cluster, "move").items())]}
    proposed = {e["partition"]: e["replicas"] for e in json.loads(out[4])["partitions"]}
    # racks rack-0 (brokers 0, 2) and rack-1 (broker 1): two replicas always on both racks
    assert sorted(proposed) == [0, 1, 2] and all(len(r) == 2 and 1 in r and len(set(r)) == 2
                                                 for r in proposed.values())
    assert kctl(cluster, "reassign", "--generate", "--topics-to-move-json-file", str(topics), "--broker-list",
                "0,1,7", code=1).output.count("7 of --broker-list is not alive")

    plan = write_plan(tmp_path / "plan.json", {("move", 0): [1, 2], ("move", 1): [2, 1]})
    out = kctl(cluster, "reassign", "--execute", "--reassignment-json-file", plan).stdout
    assert out == (
        "Current partition replica assignment\n\n"
        '{"version":1,"partitions":[{"topic":"move","partition":0,"replicas":[0,1],"log_dirs":["any","any"]},'
        '{"topic":"move","partition":1,"replicas":[1,2],"log_dirs":["any","any"]}]}\n\n'
        "Save this to use as the --reassignment-json-file option during rollback\n"
        "Successfully started partition reassignments for move-0,move-1\n")

    def verified():
        result = kctl(cluster, "reassign", "--verify", "--reassignment-json-file", plan, code=None)
        return result if result.exit_code == 0 else None
    done = wait_for(verified, 60, "the reassignment verified")
    # complete: the tool clears every replication throttle it may have set (none here), and says so
    assert done.stdout == ("Status of partition reassignment:\n"
                           "Reassignment of partition move-0 is completed.\n"
                           "Reassignment of partition move-1 is completed.\n"
                           "Clearing broker-level throttles on brokers 0,1,2\n"
                           "Clearing topic-level throttles on topic move\n")
    assert assignment(cluster, "move") == {0: [1, 2], 1: [2, 1], 2: [2, 0]}
    doc = json.loads(kctl(cluster, "reassign", "--verify", "--reassignment-json-file", plan, "--json").stdout)
    assert doc["complete"] and [p["status"] for p in doc["partitions"]] == ["completed", "completed"]
    wait_for(lambda: all(sorted(p.isrs) == sorted(p.replicas)
                         for p in metadata(cluster, "move").topics["move"].partitions.values()), 60, "full ISRs")
    assert len(consume_all(cluster, "move", 60)) == 60  # every acknowledged record still there
    assert kctl(cluster, "reassign", "--list").stdout == "No partition reassignments found.\n"

    # a partition not where the plan says (the rollback plan, now stale) and no reassignment running
    stale = write_plan(tmp_path / "stale.json", {("move", 0): [0, 1]})
    result = kctl(cluster, "reassign", "--verify", "--reassignment-json-file", stale, code=1)
    assert "There is no active reassignment of partition move-0, but replica set is 1,2 rather than 0,1." \
        in result.stdout


def test_reassign_in_progress_list_cancel(cluster, tmp_path):
    """A reassignment onto a paused broker stays in progress: --list, --verify (exit 1), --execute refused
    without --additional, --cancel."""
    controller = cluster.controller_id()
    paused = next(b for b in (2, 1, 0) if b != controller)
    others = [b for b in range(3) if b != paused]
    create_topic(cluster, "stuck", assignment=[others])
    bootstrap = ",".join(cluster.brokers[b].bootstrap for b in others)
    plan = write_plan(tmp_path / "stuck.json", {("stuck", 0): [*others, paused]})
    cluster.brokers[paused].proc.send_signal(signal.SIGSTOP)
    try:
        kctl(cluster, "reassign", "--execute", "--reassignment-json-file", plan, bootstrap=bootstrap)
        listed = kctl(cluster, "reassign", "--list", bootstrap=bootstrap).stdout
        assert listed == ("Current partition reassignments:\n"
                          f"stuck-0: replicas: {','.join(map(str, [*others, paused]))}. adding: {paused}.\n")
        assert json.loads(kctl(cluster, "reassign", "--list", "--json", bootstrap=bootstrap).stdout) == {
            "reassignments": [{"topic": "stuck", "partition": 0, "replicas": [*others, paused],
                               "adding_replicas": [paused], "removing_replicas": []}]}
        result = kctl(cluster, "reassign", "--verify", "--reassignment-json-file", plan, code=1, bootstrap=bootstrap)
        assert result.stdout == "Status of partition reassignment:\nReassignment of partition stuck-0 is still in progress.\n"
        refused = kctl(cluster, "reassign", "--execute", "--reassignment-json-file", plan, code=1, bootstrap=bootstrap)
        assert "Cannot execute because there is an existing partition assignment" in refused.output

        # --preserve-throttles: clearing them would have to reach the paused broker too (as Kafka's tool would)
        out = kctl(cluster, "reassign", "--cancel", "--reassignment-json-file", plan, "--preserve-throttles",
                   bootstrap=bootstrap).stdout
        assert out == "Successfully cancelled partition reassignment for: stuck-0\n"
        assert assignment(cluster, "stuck") == {0: others}
        assert kctl(cluster, "reassign", "--list", bootstrap=bootstrap).stdout == "No partition reassignments found.\n"
        again = kctl(cluster, "reassign", "--cancel", "--reassignment-json-file", plan, "--preserve-throttles",
                     bootstrap=bootstrap).stdout
        assert again == "None of the specified partition reassignments are active.\n"
    finally:
        cluster.brokers[paused].proc.send_signal(signal.SIGCONT)


def test_reassign_refusals(cluster, tmp_path):
    create_topic(cluster, "refuse", assignment=[[0, 1]])
    dirs = write_plan(tmp_path / "dirs.json", {("refuse", 0): [1, 2]}, log_dirs=["/data/kafka-2", "any"])
    refused = kctl(cluster, "reassign", "--execute", "--reassignment-json-file", dirs, code=1).output
    assert "Failed to alter dir for refuse-0-1 to /data/kafka-2: LOG_DIR_NOT_FOUND" in refused  # before anything
    unknown = write_plan(tmp_path / "u.json", {("refuse", 0): [1, 9]})
    assert "Unknown broker id 9" in kctl(cluster, "reassign", "--execute", "--reassignment-json-file", unknown,
                                         code=1).output
    missing = write_plan(tmp_path / "m.json", {("refuse", 5): [1, 2]})
    assert "Unable to find partition: refuse-5" in kctl(cluster, "reassign", "--execute", "--reassignment-json-file",
                                                        missing, code=1).output
    assert assignment(cluster, "refuse") == {0: [0, 1]}  # nothing started


def test_reassign_names_the_log_dir_of_a_new_replica(cluster, tmp_path):
    """A plan naming the log dir of a replica its broker does not host yet: AlterReplicaLogDirs answers
    REPLICA_NOT_AVAILABLE (the dir remembered for the replica's creation) and is asked again after the
    reassignment started, until the replica is there (ReassignPartitionsCommand.executeMoves)."""
    create_topic(cluster, "dirs", partitions=1, assignment=[[0, 1]])
    target = str(cluster.brokers[2].log_dir.resolve())
    plan = write_plan(tmp_path / "p.json", {("dirs", 0): [1, 2]}, log_dirs=["any", target])
    out = kctl(cluster, "reassign", "--execute", "--reassignment-json-file", plan).stdout
    assert "Successfully started partition reassignment for dirs-0" in out
    assert "Successfully started log directory move for: dirs-0-2" in out
    wait_for(lambda: kctl(cluster, "reassign", "--verify", "--reassignment-json-file", plan, code=None).exit_code == 0,
             60, "the reassignment completed")
    status = json.loads(kctl(cluster, "reassign", "--verify", "--reassignment-json-file", plan, "--json").stdout)
    assert status["log_dirs"] == [{"topic": "dirs", "partition": 0, "broker": 2, "status": "completed",
                                   "target_log_dir": target, "current_log_dir": target, "future_log_dir": None}]


def entity_config(cluster, kind: str, name: str) -> dict[str, str]:
    """/config/<kind>/<name>'s config as Kafka writes it ({} when the node is not there)."""
    node = f"{cluster.chroot}/config/{kind}/{name}"
    return cluster.read_json(f"/config/{kind}/{name}")["config"] if cluster.zk.exists(node) else {}


def test_reassign_throttle(cluster, tmp_path):
    """--execute --throttle sets Kafka's throttles in ZooKeeper as kafka-reassign-partitions writes them, the
    brokers hold the move to the rate, --additional changes the rate of the running move, and --verify clears
    every throttle once it is complete."""
    from confluent_kafka import Producer

    create_topic(cluster, "throttled", assignment=[[0], [1]])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20})
    size = 4 << 20  # bytes of records on partition 0: four replica fetches' worth (replica.fetch.max.bytes)
    for i in range(size // 4096):
        producer.produce("throttled", value=bytes(4096 - 64), key=str(i).encode(), partition=0)
        producer.poll(0)
    producer.produce("throttled", value=b"small", partition=1)
    assert producer.flush(60) == 0
    plan = write_plan(tmp_path / "throttle.json", {("throttled", 0): [1], ("throttled", 1): [2]})
    rate, faster = 512 << 10, 1 << 20

    started = time.monotonic()
    out = kctl(cluster, "reassign", "--execute", "--reassignment-json-file", plan, "--throttle", str(rate)).stdout
    assert out.endswith("Save this to use as the --reassignment-json-file option during rollback\n"
                        "Warning: You must run --verify periodically, until the reassignment completes, to ensure "
                        "the throttle is removed.\n"
                        f"The inter-broker throttle limit was set to {rate} B/s\n"
                        "Successfully started partition reassignments for throttled-0,throttled-1\n"), out
    # leaders: the current replicas of the moving partitions; followers: the replicas being added; the rates on
    # every broker a partition leaves or reaches
    assert entity_config(cluster, "topics", "throttled") == {
        "leader.replication.throttled.replicas": "0:0,1:1", "follower.replication.throttled.replicas": "0:1,1:2"}
    for broker in (0, 1, 2):
        assert entity_config(cluster, "brokers", str(broker)) == {
            "leader.replication.throttled.rate": str(rate), "follower.replication.throttled.rate": str(rate)}
    # 4 MiB at 512 KiB/s: still moving; --verify says so and leaves the throttles in place
    result = kctl(cluster, "reassign", "--verify", "--reassignment-json-file", plan, code=1)
    assert "Reassignment of partition throttled-0 is still in progress." in result.stdout
    assert "Clearing" not in result.stdout
    assert entity_config(cluster, "brokers", "0")["leader.replication.throttled.rate"] == str(rate)

    # the same plan again with --additional: the running move's new throttle
    doc = json.loads(kctl(cluster, "reassign", "--execute", "--additional", "--reassignment-json-file", plan,
                          "--throttle", str(faster), "--json").stdout)
    throttle = doc["throttle"]
    assert (throttle["rate"], throttle["brokers"], throttle["log_dirs_rate"]) == (faster, [0, 1, 2], None)
    # partition 0 still moves from 0 to 1; the small partition 1 may have completed meanwhile, and then its
    # replicas are sources of a move that adds none (1:2 among the leaders), as Kafka's move map has it
    lists = throttle["topics"]["throttled"]
    assert lists["leader.replication.throttled.replicas"] in ("0:0,1:1", "0:0,1:2")
    assert lists["follower.replication.throttled.replicas"] in ("0:1,1:2", "0:1")
    assert entity_config(cluster, "topics", "throttled") == lists
    assert entity_config(cluster, "brokers", "2")["follower.replication.throttled.rate"] == str(faster)

    def verified():
        result = kctl(cluster, "reassign", "--verify", "--reassignment-json-file", plan, code=None)
        return result if result.exit_code == 0 else None
    done = wait_for(verified, 120, "the throttled reassignment verified")
    took = time.monotonic() - started
    assert done.stdout == ("Status of partition reassignment:\n"
                           "Reassignment of partition throttled-0 is completed.\n"
                           "Reassignment of partition throttled-1 is completed.\n"
                           "Clearing broker-level throttles on brokers 0,1,2\n"
                           "Clearing topic-level throttles on topic throttled\n")
    for broker in (0, 1, 2):
        assert entity_config(cluster, "brokers", str(broker)) == {}
    assert entity_config(cluster, "topics", "throttled") == {}
    # A lower bound only a working throttle guarantees (a slow machine only makes the move longer): the leader
    # sends at most one fetch's worth (1 MiB) beyond the rate (at most `faster` from the --additional on), so
    # the 4 MiB cannot have moved in less than 3 s; unthrottled, they move in well under a second.
    assert took >= (size - (1 << 20)) / faster * 0.9, f"moved in {took:.1f}s"
    assert assignment(cluster, "throttled") == {0: [1], 1: [2]}
    assert len(consume_all(cluster, "throttled", size // 4096 + 1)) == size // 4096 + 1


# -- configs -------------------------------------------------------------------------------------------
def topic_configs(cluster, topic: str) -> dict:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return {k: v.value for k, v in future.result(30).items()}


def test_configs_topics(cluster):
    create_topic(cluster, "conf", partitions=1, rf=1, config={"retention.ms": "3600000"})
    out = kctl(cluster, "configs", "--describe", "--entity-type", "topics", "--entity-name", "conf").stdout
    lines = out.splitlines()
    assert lines[0] == "Dynamic configs for topic conf are:" and len(lines) == 2
    assert lines[1].startswith("  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
                               "retention.ms=3600000")

    out = kctl(cluster, "configs", "--alter", "--entity-type", "topics", "--entity-name", "conf", "--add-config",
               "segment.ms=600000,cleanup.policy=[compact,delete]").stdout
    assert out == "Completed updating config for topic conf.\n"
    seen = topic_configs(cluster, "conf")
    assert (seen["segment.ms"], seen["cleanup.policy"], seen["retention.ms"]) == ("600000", "compact,delete",
                                                                                  "3600000")
    doc = json.loads(kctl(cluster, "configs", "--describe", "--entity-type", "topic", "--entity-name", "conf",
                          "--all", "--json").stdout)
    [entity] = doc["entities"]
    by_name = {c["name"]: c for c in entity["configs"]}
    assert entity["entity_name"] == "conf" and entity["error"] is None
    assert by_name["segment.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert by_name["segment.ms"]["synonyms"][0] == {"name": "segment.ms", "value": "600000",
                                                    "source": "DYNAMIC_TOPIC_CONFIG"}
    assert by_name["max.message.bytes"]["source"] in ("DEFAULT_CONFIG", "STATIC_BROKER_CONFIG")
    assert set(by_name) >= set(seen)  # every config, as the AdminClient sees them

    out = kctl(cluster, "configs", "--alter", "--entity-type", "topics", "--entity-name", "conf",
               "--delete-config", "segment.ms").stdout
    assert out == "Completed updating config for topic conf.\n" and "segment.ms" not in {
        c.split("=")[0].strip() for c in kctl(cluster, "configs", "--describe", "--entity-type", "topics",
                                              "--entity-name", "conf").stdout.splitlines()[1:]}
    again = kctl(cluster, "configs", "--alter", "--entity-type", "topics", "--entity-name", "conf",
                 "--delete-config", "segment.ms", code=1).output
    assert "Invalid config(s): segment.ms" in again
    bad = kctl(cluster, "configs", "--alter", "--entity-type", "topics", "--entity-name", "conf", "--add-config",
               "retention.ms=soon", code=1).output
    assert "INVALID_CONFIG" in bad and "retention.ms" in bad
    assert topic_configs(cluster, "conf")["retention.ms"] == "3600000"
    shorthand = kctl(cluster, "configs", "--describe", "--topic", "conf").stdout.splitlines()  # kafka-configs'
    assert shorthand[0] == "Dynamic configs for topic conf are:"
    assert [line.split("=")[0] for line in shorthand[1:]] == ["  cleanup.policy", "  retention.ms"]
    unknown = kctl(cluster, "configs", "--describe", "--entity-type", "topics", "--entity-name", "nope", code=1)
    assert "UNKNOWN_TOPIC_OR_PARTITION" in unknown.output


def test_configs_brokers(cluster):
    def broker_configs(*args: str) -> dict:
        doc = json.loads(kctl(cluster, "configs", "--describe", "--entity-type", "brokers", *args, "--json").stdout)
        return {e["entity_name"]: {c["name"]: c for c in e["configs"]} for e in doc["entities"]}

    out = kctl(cluster, "configs", "--alter", "--entity-type", "brokers", "--entity-default", "--add-config",
               "log.cleaner.threads=2").stdout
    assert out == "Completed updating default config for brokers in the cluster.\n"
    out = kctl(cluster, "configs", "--alter", "--entity-type", "brokers", "--entity-name", "1", "--add-config",
               "log.cleaner.threads=3").stdout
    assert out == "Completed updating config for broker 1.\n"
    try:
        described = kctl(cluster, "configs", "--describe", "--entity-type", "brokers", "--entity-default").stdout
        assert described.startswith("Default configs for brokers in the cluster are:\n  log.cleaner.threads=2 "
                                    "sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=2")
        assert kctl(cluster, "configs", "--describe", "--broker-defaults").stdout == described
        own = broker_configs("--entity-name", "1")["1"]["log.cleaner.threads"]
        assert (own["value"], own["source"]) == ("3", "DYNAMIC_BROKER_CONFIG")
        assert [s["source"] for s in own["synonyms"]][:2] == ["DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG"]
        everything = broker_configs("--all")  # every broker and the default
        assert set(everything) == {"0", "1", "2", "<default>"}
        assert everything["0"]["log.cleaner.threads"]["value"] == "2"
        assert everything["0"]["log.cleaner.threads"]["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
        assert kctl(cluster, "configs", "--describe", "--entity-type", "brokers", "--entity-name", "0").stdout == \
            "Dynamic configs for broker 0 are:\n"
    finally:
        kctl(cluster, "configs", "--alter", "--entity-type", "brokers", "--entity-name", "1", "--delete-config",
             "log.cleaner.threads")
        kctl(cluster, "configs", "--alter", "--entity-type", "brokers", "--entity-default", "--delete-config",
             "log.cleaner.threads")
    assert "log.cleaner.threads" not in broker_configs("--entity-default")["<default>"]
    # a replication throttle (KIP-73) is a dynamic per-broker config, a LONG of at least 0
    assert kctl(cluster, "configs", "--alter", "--entity-type", "brokers", "--entity-name", "0", "--add-config",
                "leader.replication.throttled.rate=1000").stdout == "Completed updating config for broker 0.\n"
    try:
        assert entity_config(cluster, "brokers", "0") == {"leader.replication.throttled.rate": "1000"}
        assert broker_configs("--entity-name", "0")["0"]["leader.replication.throttled.rate"]["value"] == "1000"
    finally:
        kctl(cluster, "configs", "--alter", "--entity-type", "brokers", "--entity-name", "0", "--delete-config",
             "leader.replication.throttled.rate")
    negative = kctl(cluster, "configs", "--alter", "--entity-type", "brokers", "--entity-name", "0",
                    "--add-config", "leader.replication.throttled.rate=-1", code=1).output
    assert "Value must be at least 0" in negative
    # users and clients are kafka-configs' too (their quotas and SCRAM credentials), through this cluster's broker
    assert kctl(cluster, "configs", "--alter", "--entity-type", "users", "--entity-name", "cfg-u", "--add-config",
                "producer_byte_rate=1024").stdout == "Completed updating config for user cfg-u.\n"
    assert "Quota configs for user-principal 'cfg-u' are producer_byte_rate=1024.0" in kctl(
        cluster, "configs", "--describe", "--entity-type", "users", "--entity-name", "cfg-u").stdout
    kctl(cluster, "configs", "--alter", "--entity-type", "users", "--entity-name", "cfg-u", "--delete-config",
         "producer_byte_rate")
    assert "broker loggers" in kctl(cluster, "configs", "--describe", "--entity-type", "broker-loggers", code=2).output
    assert "valid integer broker id" in kctl(cluster, "configs", "--describe", "--entity-type", "brokers",
                                             "--entity-name", "one", code=2).output
