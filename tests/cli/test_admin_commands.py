"""The pure parts of kctl elect-leaders, topics add-partitions, reassign and configs, in process: the JSON files
Kafka's tools take, plan generation, option checks that need no broker, and the output formats."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kcli.cli.app import app
from kcli.errors import KcliError


def run(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "KCTL_BOOTSTRAP_SERVER": ""})


# -- elect-leaders ---------------------------------------------------------------------------------------
def test_election_json_is_kafkas_format():
    from kcli.client.elections import parse_election_json

    text = json.dumps({"partitions": [{"topic": "a", "partition": 1}, {"topic": "b", "partition": 0}]})
    assert parse_election_json(text) == [("a", 1), ("b", 0)]
    for bad, message in [("{", "not JSON"), ("[]", "expected"), ('{"partitions": []}', "empty"),
                         ('{"partitions": [{"topic": "a"}]}', r"partitions\[0\]"),
                         ('{"partitions": [{"topic": "a", "partition": true}]}', r"partitions\[0\]"),
                         ('{"partitions": [{"topic": "a", "partition": 0}, {"topic": "a", "partition": 0}]}',
                          "duplicate partitions: a-0")]:
        with pytest.raises(KcliError, match=message):
            parse_election_json(bad, "f.json")


def test_election_result_lines():
    from kcli.cli.elect_leaders import _render
    from kcli.client.elections import ElectionResult

    results = [ElectionResult("t", 0), ElectionResult("t", 1), ElectionResult("t", 2, 84, "not needed"),
               ElectionResult("u", 0, 80, "Failed to elect leader for partition u-0")]
    runner = CliRunner()

    import typer

    probe = typer.Typer()
    probe.command()(lambda: _render("PREFERRED", results))
    out = runner.invoke(probe, []).stdout
    assert out == ("Successfully completed leader election (PREFERRED) for partitions t-0, t-1\n"
                   "Valid replica already elected for partitions t-2\n"
                   "Error completing leader election (PREFERRED) for partition: u-0: PREFERRED_LEADER_NOT_AVAILABLE "
                   "(80): Failed to elect leader for partition u-0\n")
    assert [r.to_json()["outcome"] for r in results] == ["elected", "elected", "not_needed", "failed"]


def test_elect_leaders_usage_needs_no_broker(tmp_path):
    assert run("elect-leaders").exit_code == 2
    assert run("elect-leaders", "--all-topic-partitions", "--topic", "t").exit_code == 2
    assert run("elect-leaders", "--partition", "1", "--all-topic-partitions").exit_code == 2
    assert run("elect-leaders", "--election-type", "sideways", "--all-topic-partitions").exit_code == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = run("elect-leaders", "--path-to-json-file", str(bad))
    assert result.exit_code == 2 and "bad.json" in result.output and "Traceback" not in result.output
    assert run("elect-leaders", "--path-to-json-file", str(tmp_path / "missing.json")).exit_code == 3
    no_broker = run("elect-leaders", "--all-topic-partitions")
    assert no_broker.exit_code == 2 and "--bootstrap-server" in no_broker.output


# -- topics add-partitions -------------------------------------------------------------------------------
def _view(**counts: int):
    from kcli.client.topics import ClusterView, PartitionInfo, TopicDescription

    topics = {name: TopicDescription(name, None, False, [PartitionInfo(p, 0, 0, (0,), (0,), ()) for p in range(n)])
              for name, n in counts.items()}
    return ClusterView("c", 0, {0: ("h", 1)}, topics)


def test_partition_growth_plan():
    from kcli.client.topics import parse_replica_assignment, plan_partition_growth
    from kcli.errors import UsageError

    [g] = plan_partition_growth(_view(t=2), ["t"], 4)
    assert (g.topic, g.current, g.wanted, g.assignment) == ("t", 2, 4, None)
    # every partition listed (kafka-topics --alter's form: the existing ones are skipped), or only the new ones
    full = plan_partition_growth(_view(t=2), ["t"], 4, parse_replica_assignment("0:1,1:2,2:0,0:2"))
    new = plan_partition_growth(_view(t=2), ["t"], 4, parse_replica_assignment("2:0,0:2"))
    assert full[0].assignment == new[0].assignment == ((2, 0), (0, 2))
    with pytest.raises(UsageError, match="can only be increased: t has 2"):
        plan_partition_growth(_view(t=2), ["t"], 1)
    with pytest.raises(UsageError, match="give all 4 or the 2 new ones"):
        plan_partition_growth(_view(t=2), ["t"], 4, parse_replica_assignment("0:1,1:2,2:0"))
    with pytest.raises(KcliError, match="topic u not found"):
        plan_partition_growth(_view(t=2), ["u"], 4)


def test_mistyped_topics_subcommand_is_a_usage_error(tmp_path):
    result = run("topics", "lsit")
    assert result.exit_code == 2 and "No such command 'lsit'" in result.output and "'list'" in result.output
    assert "No such file" not in result.output
    assert run("topics", str(tmp_path / "missing")).exit_code == 3  # a path still goes to the log-dir rollup
    assert run("topics", "add-partitions", "t").exit_code == 2  # --partitions is required


def test_kafka_topics_spellings():
    from kcli.cli.topics import _kafka_spelling

    assert _kafka_spelling("--alter", ["--alter", "--topic", "t", "--partitions", "6"]) == \
        ["alter", "--partitions", "6", "t"]
    assert _kafka_spelling("--describe", ["--topic=a", "--describe", "--topic", "b", "--json"]) == \
        ["describe", "--json", "a", "b"]
    # the subcommand runs: it gets as far as the (absent) broker
    nobody = run("topics", "-b", "127.0.0.1:1", "--alter", "--topic", "t", "--partitions", "3")
    assert nobody.exit_code == 3 and "127.0.0.1:1" in nobody.output
    assert run("topics", "-b", "127.0.0.1:1", "--list", "--describe").exit_code == 2
    assert "--partitions" in run("topics", "--alter", "--help").output


# -- reassign --------------------------------------------------------------------------------------------
PLAN = {"version": 1, "partitions": [{"topic": "b", "partition": 0, "replicas": [2, 1], "log_dirs": ["any", "any"]},
                                     {"topic": "a", "partition": 1, "replicas": [1, 3]},
                                     {"topic": "a", "partition": 0, "replicas": [3, 2], "log_dirs": ["/d1", "any"]}]}


def test_reassignment_json_round_trip_in_kafkas_format():
    from kcli.client.reassign import format_reassignment_json, parse_reassignment

    plan = parse_reassignment(json.dumps(PLAN))
    assert plan.partitions == {("b", 0): [2, 1], ("a", 1): [1, 3], ("a", 0): [3, 2]}
    assert plan.log_dirs == {("a", 0, 3): "/d1"}
    # formatAsReassignmentJson: sorted by topic and partition, Jackson's compact JSON, a log dir per replica
    assert format_reassignment_json(plan.partitions, plan.log_dirs) == (
        '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[3,2],"log_dirs":["/d1","any"]},'
        '{"topic":"a","partition":1,"replicas":[1,3],"log_dirs":["any","any"]},'
        '{"topic":"b","partition":0,"replicas":[2,1],"log_dirs":["any","any"]}]}')


@pytest.mark.parametrize("doc,message", [
    ("{", "not a valid JSON"),
    ({"version": 2, "partitions": []}, "Not supported version field value 2"),
    ({"version": 1, "partitions": []}, "Partition reassignment list cannot be empty"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": []}]}, "Partition replica list cannot be empty"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1]}, {"topic": "a", "partition": 0,
                                                                       "replicas": [2]}]},
     "contains duplicate topic partitions: a-0"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1, 1, 2]}]},
     "may not contain duplicate entries: a-0 contains multiple entries for 1"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]},
     "Size of replicas list"),
    ({"partitions": [{"topic": "a", "partition": "0", "replicas": [1]}]}, "partitions\\[0\\]"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": "1,2"}]}, "not a list of broker ids"),
])
def test_reassignment_json_checks(doc, message):
    from kcli.client.reassign import parse_reassignment
    from kcli.errors import UsageError

    with pytest.raises(UsageError, match=message):
        parse_reassignment(doc if isinstance(doc, str) else json.dumps(doc), "plan.json")


def test_topics_to_move_json():
    from kcli.client.reassign import parse_topics_to_move
    from kcli.errors import UsageError

    assert parse_topics_to_move('{"version":1,"topics":[{"topic":"a"},{"topic":"b"}]}') == ["a", "b"]
    with pytest.raises(UsageError, match="duplicate entries: a"):
        parse_topics_to_move('{"topics":[{"topic":"a"},{"topic":"a"}]}')
    with pytest.raises(UsageError, match="no topics"):
        parse_topics_to_move('{"topics":[]}')


@pytest.mark.parametrize("racks", [None, {0: "r1", 1: "r3", 2: "r3", 3: "r2", 4: "r2", 5: "r1"},
                                   {0: "a", 1: "b", 2: "a"}])
@pytest.mark.parametrize("partitions,rf", [(1, 1), (7, 3), (12, 2), (30, 3)])
def test_assignment_is_kafkas_as_the_broker_computes_it(racks, partitions, rf):
    """The client's port of AdminUtils.assignReplicasToBrokers gives what the broker's (kcli.broker.admin_utils,
    itself checked against Kafka's tables) gives, draw for draw."""
    import random

    from kcli.broker import admin_utils
    from kcli.client.reassign import Broker, assign_replicas

    ids = sorted(racks) if racks else [0, 1, 2, 3, 4]
    for seed in range(5):
        ours = assign_replicas([Broker(b, racks[b] if racks else None) for b in ids], partitions, rf,
                               random.Random(seed))
        theirs = admin_utils.assign_replicas_to_brokers(
            [admin_utils.BrokerMetadata(b, racks[b] if racks else None) for b in ids], partitions, rf,
            rng=random.Random(seed))
        assert ours == theirs


def test_calculate_assignment_keeps_each_topics_replication_factor():
    import random

    from kcli.client.reassign import Broker, calculate_assignment

    current = {("a", 0): [0, 1, 2], ("a", 1): [1, 2, 0], ("b", 0): [0], ("b", 1): [1], ("b", 2): [2]}
    proposed = calculate_assignment(current, [Broker(3, "x"), Broker(4, "y"), Broker(5, "x")], random.Random(1))
    assert sorted(proposed) == sorted(current)
    assert all(len(proposed[tp]) == len(current[tp]) and set(proposed[tp]) <= {3, 4, 5} for tp in current)
    assert all(4 in proposed[("a", p)] for p in (0, 1))  # two racks, three replicas: rack y is always used


def test_reassign_states_and_lines():
    from kcli.client.reassign import OngoingReassignment, PartitionState

    assert OngoingReassignment("foo", 1, (1, 2, 3), (4, 5), (1, 2)).line() == \
        "foo-1: replicas: 1,2,3. adding: 4,5. removing: 1,2."
    assert OngoingReassignment("bar", 0, (2, 3, 0), (), (0,)).line() == "bar-0: replicas: 2,3,0. removing: 0."
    assert PartitionState("t", 0, (1, 2), (1, 2), True).line() == "Reassignment of partition t-0 is completed."
    assert PartitionState("t", 0, (1, 2, 3), (2, 3), False).line() == \
        "Reassignment of partition t-0 is still in progress."
    assert PartitionState("t", 0, (1, 2), (2, 3), True).line() == \
        "There is no active reassignment of partition t-0, but replica set is 1,2 rather than 2,3."


def test_reassign_log_dir_move_states_and_lines():
    """replicaMoveStatesToString's lines, from where DescribeLogDirs finds the replica's log and its future log."""
    from kcli.client.reassign import LogDirMoveState

    states = {
        LogDirMoveState("t", 0, 1, "/b", "/b", None): ("completed", "Reassignment of replica t-0-1 completed "
                                                                    "successfully."),
        LogDirMoveState("t", 0, 1, "/b", "/a", "/b"): ("in_progress", "Reassignment of replica t-0-1 is still in "
                                                                       "progress."),
        LogDirMoveState("t", 0, 1, "/b", "/a", "/c"): ("moving_elsewhere", "Partition t-0 on broker 1 is being "
                                                                            "moved to log dir /c instead of /b."),
        LogDirMoveState("t", 0, 1, "/b", "/a", None): ("cancelled", "Partition t-0 on broker 1 is not being moved "
                                                                     "from log dir /a to /b."),
        LogDirMoveState("t", 0, 1, "/b", None, None): ("missing", "Partition t-0 cannot be found in any live log "
                                                                   "directory on broker 1."),
    }
    assert {state: (state.status, state.line()) for state in states} == states
    assert LogDirMoveState("t", 0, 1, "/b", "/a", "/b").to_json() == {
        "topic": "t", "partition": 0, "broker": 1, "status": "in_progress", "target_log_dir": "/b",
        "current_log_dir": "/a", "future_log_dir": "/b"}


def test_reassign_usage_needs_no_broker(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN))
    assert "exactly one action" in run("reassign").output
    assert run("reassign", "--list", "--verify").exit_code == 2
    assert "--verify needs --reassignment-json-file" in run("reassign", "--verify").output
    assert "--generate needs --broker-list" in run("reassign", "--generate", "--topics-to-move-json-file",
                                                   str(plan)).output
    wrong = run("reassign", "--verify", "--reassignment-json-file", str(plan), "--throttle", "10")
    assert wrong.exit_code == 2 and '"--throttle" can\'t be used with action "--verify"' in wrong.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"version":1,"partitions":[]}')
    empty = run("reassign", "--execute", "--reassignment-json-file", str(bad))
    assert empty.exit_code == 2 and "cannot be empty" in empty.output
    assert run("reassign", "--cancel", "--reassignment-json-file", str(tmp_path / "nope.json")).exit_code == 3
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics":[{"topic":"a"}]}')
    result = run("reassign", "--generate", "--topics-to-move-json-file", str(topics), "--broker-list", "1,x")
    assert result.exit_code == 2 and "--broker-list" in result.output


# -- configs ---------------------------------------------------------------------------------------------
def test_config_values_as_kafka_configs_takes_them():
    from kcli.client.configs import parse_add_config, parse_delete_config, resource_name
    from kcli.errors import UsageError

    assert parse_add_config(["a=1,b=[x,y,z],c=3", "d = 4"]) == {"a": "1", "b": "x,y,z", "c": "3", "d": "4"}
    assert parse_add_config(["k=v=w"]) == {"k": "v=w"}
    with pytest.raises(UsageError, match="is not key=value"):
        parse_add_config(["a=1,b"])
    assert parse_delete_config(["a,b", "c", "a"]) == ["a", "b", "c"]
    assert resource_name("brokers", "<default>") == "" and resource_name("brokers", "7") == "7"
    assert resource_name("topics", "orders") == "orders"
    with pytest.raises(UsageError, match="valid integer broker id, but it is: x"):
        resource_name("brokers", "x")


def test_config_lines_are_kafka_configs():
    from kcli.cli.configs import _heading
    from kcli.client.configs import ConfigEntry, ConfigSynonym, EntityConfigs

    entry = ConfigEntry("retention.ms", "1000", "DYNAMIC_TOPIC_CONFIG", False, False, (
        ConfigSynonym("retention.ms", "1000", "DYNAMIC_TOPIC_CONFIG"),
        ConfigSynonym("log.retention.hours", "168", "DEFAULT_CONFIG")))
    assert entry.line() == ("retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, "
                            "DEFAULT_CONFIG:log.retention.hours=168}")
    secret = ConfigEntry("ssl.key.password", None, "DYNAMIC_BROKER_CONFIG", False, True)
    assert secret.line() == "ssl.key.password=null sensitive=true synonyms={}"
    assert _heading(EntityConfigs("topics", "orders"), False) == "Dynamic configs for topic orders are:"
    assert _heading(EntityConfigs("brokers", "1"), True) == "All configs for broker 1 are:"
    assert _heading(EntityConfigs("brokers", "<default>"), False) == "Default configs for brokers in the cluster are:"


@pytest.mark.parametrize("args,message", [
    ([], "give one of --describe, --alter"),
    (["--describe", "--alter", "--entity-type", "topics"], "give one of"),
    (["--describe"], "--entity-type is required"),
    (["--describe", "--entity-type", "users"], "kctl quotas"),
    (["--alter", "--entity-type", "clients", "--entity-name", "c"], "kctl quotas"),
    (["--describe", "--entity-type", "groups"], "expected topics or brokers"),
    (["--describe", "--entity-type", "topics", "--entity-default"], "--entity-default is for --entity-type brokers"),
    (["--describe", "--entity-type", "topics", "--add-config", "a=1"], "go with --alter"),
    (["--alter", "--entity-type", "topics", "--entity-name", "t"], "nothing to change"),
    (["--alter", "--entity-type", "topics", "--add-config", "a=1"], "--alter needs --entity-name"),
    (["--alter", "--entity-type", "topics", "--entity-name", "t", "--add-config", "a=1", "--delete-config", "a"],
     "a: both added and deleted"),
    (["--alter", "--entity-type", "topics", "--entity-name", "t", "--add-config", "a"], "is not key=value"),
    (["--alter", "--entity-type", "topics", "--entity-name", "t", "--add-config", "a=1", "--all"],
     "--all goes with --describe"),
    (["--describe", "--entity-type", "brokers", "--entity-name", "b1"], "valid integer broker id"),
    (["--describe", "--topic", "t", "--entity-type", "topics"], "--topic stands for --entity-type"),
    (["--describe", "--topic", "t", "--broker", "1"], "one entity type"),
    (["--alter", "--topic", "t"], "nothing to change"),
    (["--describe", "--broker", "b1"], "valid integer broker id"),
])
def test_configs_usage_needs_no_broker(args, message):
    result = run("configs", *args)
    assert result.exit_code == 2 and message in result.output, result.output
