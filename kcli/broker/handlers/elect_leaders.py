"""ElectLeaders (43): preferred and unclean leader elections on request (KIP-183, KIP-460).

As Kafka's KafkaApis.handleElectLeaders and ReplicaManager.electLeaders in ZooKeeper mode: the request goes to
this broker's controller (kcli.broker.controller.ControllerRunner), which answers NOT_CONTROLLER per partition
unless it is the active one. The answer then waits, up to the request's timeout counted from its arrival, until
this broker's metadata cache shows each elected leader (DelayedElectLeader); a partition not seen by then gets
REQUEST_TIMED_OUT. A null topic list means every partition in the metadata cache, and then the partitions that
needed no election are left out of the answer. A standalone broker is the leader of everything it has: an
existing partition needs no election.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.controller.elections import ElectionType
from kcli.broker.errors import BrokerError, NotControllerError, error_code_for, error_message_for
from kcli.broker.handlers import authz
from kcli.broker.handlers.common import ZERO, RequestContext, build, ms, response_module
from kcli.protocol.acl import AclOperation
from kcli.zk.models import TopicPartition

Outcome = tuple[ErrorCode, str | None]


async def elect_leaders(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    services = ctx.services
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, ms(req.timeout)) / 1000
    every_partition = req.topic_partitions is None
    if not authz.cluster(ctx, AclOperation.ALTER):
        # Kafka's handleElectLeaders: the top-level error, and on each named partition
        denied = ErrorCode.cluster_authorization_failed
        named: dict[str, list[int]] = {}
        for t in req.topic_partitions or ():
            named.setdefault(t.topic, []).extend(int(p) for p in t.partitions)
        return build(R, "ElectLeadersResponse", throttle_time=ZERO, error_code=denied, replica_election_results=tuple(
            build(R, "ReplicaElectionResult", topic=topic, partition_result=tuple(
                build(R, "PartitionResult", partition_id=p, error_code=denied, error_message=None)
                for p in sorted(set(ps))))
            for topic, ps in named.items()))
    if every_partition:
        wanted = {TopicPartition(t.name, p.index) for t in list(services.metadata.topics.values())
                  for p in t.partitions}
    else:
        wanted = {TopicPartition(t.topic, int(p)) for t in req.topic_partitions for p in t.partitions}
    top_error = ErrorCode.none
    try:
        # v0 has no ElectionType: preferred only.
        election_type = ElectionType(int(getattr(req, "election_type", ElectionType.PREFERRED)))
    except ValueError:
        # Kafka's ElectionType.valueOf throws IllegalArgumentException: getErrorResponse, UNKNOWN_SERVER_ERROR.
        top_error = ErrorCode.unknown_server_error
        results: dict[TopicPartition, Outcome] = {tp: (top_error, None) for tp in wanted}
    else:
        results = await _elect(ctx, wanted, election_type, deadline)
    if every_partition:
        results = {tp: r for tp, r in results.items() if r[0] != ErrorCode.election_not_needed}
    topics: dict[str, list[tuple[int, Outcome]]] = {}
    for tp, outcome in sorted(results.items()):
        topics.setdefault(tp.topic, []).append((tp.partition, outcome))
    return build(R, "ElectLeadersResponse", throttle_time=ZERO, error_code=top_error, replica_election_results=tuple(
        build(R, "ReplicaElectionResult", topic=topic, partition_result=tuple(
            build(R, "PartitionResult", partition_id=partition, error_code=code, error_message=message)
            for partition, (code, message) in partitions))
        for topic, partitions in topics.items()))


async def _elect(ctx: RequestContext, wanted: set[TopicPartition], election_type: ElectionType,
                 deadline: float) -> dict[TopicPartition, Outcome]:
    services = ctx.services
    if not wanted:
        return {}
    if services.controller is None and not services.clustered:
        return {tp: (ErrorCode.election_not_needed, "Leader election not needed for topic partition.")
                if services.metadata.partition_state(tp.topic, tp.partition) is not None
                else (ErrorCode.unknown_topic_or_partition, "The partition does not exist.") for tp in wanted}
    runner = services.controller
    loop = asyncio.get_running_loop()
    if runner is None:  # ZooKeeper mode, the controller not started yet
        outcomes: dict[TopicPartition, int | Exception] = {
            tp: NotControllerError("the controller is not running on this broker") for tp in wanted}
    else:
        # Kafka waits for the controller's answer whatever the timeout, which bounds only the wait for the
        # metadata below; a controller that does not answer at all costs at most request.timeout.ms here.
        bound = max(deadline - loop.time(), int(services.config["request.timeout.ms"]) / 1000)
        try:
            outcomes = await asyncio.wait_for(asyncio.wrap_future(runner.elect_leaders(wanted, election_type)), bound)
        except asyncio.TimeoutError:
            return {tp: (ErrorCode.request_timed_out, "the controller did not answer in time") for tp in wanted}
    results: dict[TopicPartition, Outcome] = {}
    expected: dict[TopicPartition, int] = {}
    for tp, outcome in outcomes.items():
        if isinstance(outcome, int):
            expected[tp] = outcome
        elif isinstance(outcome, BrokerError):
            results[tp] = (error_code_for(outcome), error_message_for(outcome))
        else:
            results[tp] = (error_code_for(outcome), None)

    def elected(tp: TopicPartition) -> bool:
        state = services.metadata.partition_state(tp.topic, tp.partition)
        return state is not None and state.leader == expected[tp]

    if expected:
        remaining_ms = int(max(0.0, deadline - loop.time()) * 1000)
        await services.await_metadata(lambda: all(elected(tp) for tp in expected), remaining_ms)
        for tp in expected:
            results[tp] = (ErrorCode.none, None) if elected(tp) else (ErrorCode.request_timed_out, None)
    return results
