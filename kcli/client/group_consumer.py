"""A consumer-group member's consumer (``kctl consume -G GROUP TOPIC...``, kcat -G's job): the partitions the
group assigns it, from the group's committed offsets (partitions without one: the reset, kcat's -o), with the
offsets the caller stores (``store``: what it printed) committed every ``commit_interval_s``, before a
rebalance revokes the partitions, and on ``close()``; partitions lost with a generation (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, a stalled poll loop) are not committed, as Java's onPartitionsLost. ``items()`` yields
kcli.client.consume's Fetched, EndOfPartition and ConsumeNotice, and a ``Rebalanced`` on each assignment,
revocation and loss. Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client.client import KafkaClient, KafkaClientError, TopicPartition, error_name
from kcli.client.consume import (DEFAULT_MAX_WAIT_MS, ConsumeNotice, ConsumeOptions, Consumer, EndOfPartition,
                                 Fetched, OffsetSpec)
from kcli.client.group_member import GroupMember
from kcli.errors import KcliError, UsageError

DEFAULT_COMMIT_INTERVAL_S = 5.0  # auto.commit.interval.ms
METADATA_CHECK_S = 30.0  # how often the leader looks for new partitions (Java: metadata.max.age.ms, 5 min)


@dataclass(frozen=True, slots=True)
class Rebalanced:
    """The member's partitions changed: ``assigned`` (a generation joined), ``revoked`` (committed, then given
    up for a rebalance) or ``lost`` (the generation was gone before they could be committed)."""

    group: str
    member_id: str
    generation: int
    kind: str
    partitions: tuple[TopicPartition, ...]
    leader: bool = False
    protocol: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"notice": "rebalance", "group": self.group, "member_id": self.member_id,
                "generation": self.generation, "event": self.kind, "leader": self.leader,
                "protocol": self.protocol,
                "partitions": [{"topic": t, "partition": p} for t, p in self.partitions]}


GroupItem = Fetched | EndOfPartition | ConsumeNotice | Rebalanced


class GroupConsumer:
    """The member's assigned partitions, one kcli.client.consume.Consumer per topic, their fetch rounds
    interleaved; ``items()`` ends when every partition stopped at e@TS (or never, until the caller stops)."""

    def __init__(self, client: KafkaClient, member: GroupMember, options: ConsumeOptions, *,
                 commit_interval_s: float | None = DEFAULT_COMMIT_INTERVAL_S) -> None:
        if options.partitions is not None:
            raise UsageError("a group member reads the partitions the group assigns it (no partitions given)")
        self.client = client
        self.member = member
        self.options = options
        # the start of a partition the group has no committed offset for (auto.offset.reset)
        self.reset = options.start if options.start.kind != "stored" else OffsetSpec("beginning")
        self.commit_interval_s = commit_interval_s
        self.assignment: tuple[TopicPartition, ...] = ()
        self._assigned: frozenset[TopicPartition] = frozenset()
        self.consumers: dict[str, Consumer] = {}
        self._stored: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._joined = False
        self._last_commit = time.monotonic()
        self._last_metadata_check = time.monotonic()
        self.metadata_check_s = METADATA_CHECK_S

    # -- what the caller printed ----------------------------------------------------------------------------
    def store(self, topic: str, partition: int, offset: int) -> None:
        """The next offset to read of a partition whose records up to it were handled (librdkafka's
        offsets_store): committed with the next commit, if the partition is still assigned."""
        if (topic, partition) in self._assigned:
            self._stored[(topic, partition)] = offset

    # -- the loop -------------------------------------------------------------------------------------------
    def items(self) -> Iterator[GroupItem]:
        while True:
            for text in self.member.poll():
                yield ConsumeNotice(text)
            if self.member.rejoin_needed:
                yield from self._rebalance()
                continue
            if self.commit_interval_s is not None and time.monotonic() - self._last_commit >= self.commit_interval_s:
                yield from (ConsumeNotice(text) for text in self.commit())
            if time.monotonic() - self._last_metadata_check >= self.metadata_check_s:
                self._last_metadata_check = time.monotonic()
                try:
                    reason = self.member.check_metadata()
                except KafkaClientError as exc:
                    reason = f"metadata check failed: {exc.describe()}"
                if reason:
                    yield ConsumeNotice(reason)
                    continue
            live = [c for c in self.consumers.values() if not c.finished]
            if not live:
                if self.consumers:
                    return  # every partition stopped at e@TS
                self.member.wait_for_news(DEFAULT_MAX_WAIT_MS / 1000)  # nothing assigned: wait for a rebalance
                continue
            wait = None
            if len(live) > 1:  # the broker may hold a fetch only when nothing else has records waiting
                wait = all(p.at_end or p.done for c in live for p in c.positions.values())
            for consumer in live:
                yield from consumer.round(wait)
                if self.member.rejoin_needed:
                    break

    def _rebalance(self) -> Iterator[GroupItem]:
        if self._joined:
            previous = self.assignment
            if self.member.generation_lost:
                kind = "lost"
                self._stored.clear()  # a commit would be refused: the next owner starts at the last commit
            else:
                kind = "revoked"
                yield from (ConsumeNotice(text) for text in self.commit())  # commit before revoking
            self.consumers.clear()
            self.assignment, self._assigned = (), frozenset()
            self._stored.clear()
            self._committed.clear()
            if previous:
                yield Rebalanced(self.member.group, self.member.member_id, self.member.generation, kind, previous,
                                 self.member.leader_id == self.member.member_id, self.member.protocol)
        joined = self.member.join()
        self._joined = True
        self.assignment, self._assigned = joined.assignment, frozenset(joined.assignment)
        self._last_commit = time.monotonic()
        yield Rebalanced(joined.group, joined.member_id, joined.generation, "assigned", joined.assignment,
                         joined.is_leader, joined.protocol)
        yield from self._start(joined.assignment)

    def _start(self, partitions: tuple[TopicPartition, ...]) -> Iterator[ConsumeNotice]:
        """A Consumer per topic of the assignment, from the group's committed offsets, else the reset."""
        if not partitions:
            return
        committed = self.client.offset_fetch(self.member.group, partitions)
        self._committed = dict(committed)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        wait_ms = max(100, self.options.max_wait_ms // len(by_topic))  # an idle round of every topic: ~max_wait
        for topic, wanted in sorted(by_topic.items()):
            options = dataclasses.replace(
                self.options, partitions=wanted, start=self.reset, max_wait_ms=wait_ms,
                offsets={p: committed[(topic, p)] for p in wanted if (topic, p) in committed})
            try:
                self.consumers[topic] = Consumer(self.client, topic, options)
            except (KafkaClientError, UsageError) as exc:  # deleted (or shrunk) since the leader assigned it
                yield ConsumeNotice(f"group {self.member.group}: cannot read {topic} {wanted}: {exc.describe()}")

    # -- commits --------------------------------------------------------------------------------------------
    def commit(self) -> list[str]:
        """Commit the stored offsets not committed yet; the notices of what failed."""
        self._last_commit = time.monotonic()
        pending = {tp: o for tp, o in self._stored.items() if self._committed.get(tp) != o}
        if not pending:
            return []
        try:
            errors = self.member.commit(pending)
        except KafkaClientError as exc:
            return [f"commit for group {self.member.group} failed: {exc.describe()}"]
        failed = []
        for tp, offset in sorted(pending.items()):
            error = errors.get(tp, ErrorCode.none)
            if error == ErrorCode.none:
                self._committed[tp] = offset
            else:
                failed.append(f"{tp[0]}-{tp[1]} at {offset}: {error_name(error)}")
        return [f"commit for group {self.member.group} failed: {'; '.join(failed)}"] if failed else []

    def close(self) -> list[ConsumeNotice | Rebalanced]:
        """Commit what was stored (unless the generation is lost), stop heartbeating, leave the group; the
        notices, and the revocation of the partitions held (kcat reports it at exit too)."""
        out: list[ConsumeNotice | Rebalanced] = []
        held = self.assignment
        lost = self.member.generation_lost
        if self._joined and not lost:  # (a rebalance in progress still takes the old generation's commits)
            out.extend(ConsumeNotice(text) for text in self.commit())
        member_id, generation = self.member.member_id, self.member.generation
        leader, protocol = self.member.leader_id == member_id, self.member.protocol
        try:
            error = self.member.close()
        except KcliError as exc:
            out.append(ConsumeNotice(f"LeaveGroup of group {self.member.group} failed: {exc.describe()}"))
        else:
            if error is not None and error != ErrorCode.none:
                out.append(ConsumeNotice(f"LeaveGroup of group {self.member.group}: error_code = {error_name(error)}"))
        if held:
            out.append(Rebalanced(self.member.group, member_id, generation, "lost" if lost else "revoked", held,
                                  leader, protocol))
        self.consumers.clear()
        self.assignment, self._assigned = (), frozenset()
        return out
