"""What a request means where the wire encoding changed meaning between versions.

The broker calls these instead of reading such fields itself, so the version rules live in one place.
"""

from __future__ import annotations

import uuid
from typing import Any

from kcli.protocol.codec import Request


def requested_topics(request: Request | Any, api_version: int | None = None) -> list[str | uuid.UUID] | None:
    """The topics a MetadataRequest asks for; None means all topics.

    Metadata v0 has no null array: an empty ``topics`` means all topics. From v1 on, null means all
    and an empty array means none (MetadataRequest.json: "An empty array indicates 'request metadata
    for no topics,' and a null array is used to indicate 'request metadata for all topics.'"; Kafka's
    ``MetadataRequest.isAllTopics``). Each topic is its name, or its topic id when the name is null
    (v10+, KIP-516), in request order, duplicates kept as sent.

    Takes a decoded ``Request`` or a kio MetadataRequest body with its ``api_version``.
    """
    if isinstance(request, Request):
        body, version = request.body, request.api_version
    else:
        if api_version is None:
            raise TypeError("requested_topics needs the api_version of a bare request body")
        body, version = request, api_version
    topics = body.topics
    if topics is None or (version == 0 and not topics):
        return None
    return [t.name if t.name is not None else t.topic_id for t in topics]
