"""Reading __consumer_offsets as a coordinator loads it: aborted transactional offset commits stay invisible."""

from __future__ import annotations

from builders import T0
from kcli.errors import KcliError
from kcli.records import Record
from kcli.records.consumer_offsets import OffsetCommitKey, OffsetCommitValue, encode_offset_commit
from kcli.records.control import ControlRecordType
from kcli.storage.log import PartitionLog
from kcli.storage.offsets_topic import iter_offsets_topic


def _commit(offset: int) -> Record:
    key, value = encode_offset_commit("g", "orders", 0, offset, commit_timestamp=T0)
    return Record(0, T0, key, value)


def test_aborted_transactional_commits_are_skipped_and_undecodable_records_reported(tmp_path):
    directory = tmp_path / "__consumer_offsets-0"
    with PartitionLog(directory) as log:
        log.append([_commit(10)])
        log.append([_commit(99)], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
        log.append_marker(ControlRecordType.ABORT, producer_id=7, producer_epoch=0, timestamp=T0)
        log.append([_commit(20)], producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True)
        log.append_marker(ControlRecordType.COMMIT, producer_id=8, producer_epoch=0, timestamp=T0)
        log.append([Record(0, T0, b"\x00\x63garbage", b"x")])  # key version 99: not decodable
    heard: list[tuple[int, KcliError]] = []
    seen = [(offset, key, value) for offset, key, value in iter_offsets_topic(directory, lambda o, e: heard.append((o, e)))]
    assert [(o, k.group, v.offset) for o, k, v in seen] == [(0, "g", 10), (3, "g", 20)]
    assert all(isinstance(k, OffsetCommitKey) and isinstance(v, OffsetCommitValue) for _o, k, v in seen)
    assert [o for o, _e in heard] == [5]
