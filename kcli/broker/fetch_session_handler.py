"""The client side of incremental fetch sessions (KIP-227) for the replica fetcher: Kafka's FetchSessionHandler.

The first Fetch to a leader is full (session id 0, epoch 0) and names every partition; when the leader answers
with a session id, later Fetches are incremental: only the partitions whose fetch parameters changed since the
last request (a new fetch offset after an append, a new leader epoch ...), and the ones no longer fetched as
forgotten. An answer the handler cannot use (an error, FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
a failed request) makes the next Fetch full again: with the old session id and epoch 0, so that the leader
drops the old session and opens a new one, or with id 0 when the leader no longer knows it.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

log = logging.getLogger("kcli.broker.replica")


@dataclass(frozen=True)
class FetchRequestData:
    """One Fetch to send: its session id and epoch, the partitions it names and the ones it forgets."""

    session_id: int
    epoch: int
    to_send: list[Hashable]
    forgotten: list[Hashable]

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler:
    def __init__(self, name: str = "") -> None:
        self.name = name
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        # what the leader's session holds: partition -> the fetch parameters last sent for it
        self.session: dict[Hashable, Any] = {}

    def build(self, wanted: dict[Hashable, Any]) -> FetchRequestData:
        """The next Fetch for ``wanted`` (partition -> its fetch parameters, compared for equality)."""
        if self.epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            self.session = dict(wanted)
            return FetchRequestData(self.session_id, self.epoch, list(wanted), [])
        previous = self.session
        to_send = [tp for tp, data in wanted.items() if previous.get(tp) != data]
        forgotten = [tp for tp in previous if tp not in wanted]
        self.session = dict(wanted)
        return FetchRequestData(self.session_id, self.epoch, to_send, forgotten)

    def handle_response(self, sent: FetchRequestData, response: Any) -> bool:
        """FetchSessionHandler.handleResponse: the session state the answer leads to; False when the answer's
        partitions must not be used (a session error)."""
        error = response.error_code
        if error != ErrorCode.none:
            log.info("%s: fetch session %d epoch %d: %s: the next fetch is full", self.name, sent.session_id,
                     sent.epoch, ErrorCode(error).name)
            if error == ErrorCode.fetch_session_id_not_found:
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
            else:
                self.epoch = INITIAL_EPOCH  # nextCloseExisting
            return False
        session_id = int(response.session_id)
        if session_id == INVALID_SESSION_ID:  # not cached, or closed by the leader: full fetches from now on
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif sent.full:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request failed (connection lost, timeout): start over with a full fetch that closes the session."""
        self.epoch = INITIAL_EPOCH
