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
