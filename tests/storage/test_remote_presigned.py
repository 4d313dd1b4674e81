"""The remote storage manager's S3 reads (issue 28): byte ranges by plain GETs on presigned URLs, against a real S3
gateway (SeaweedFS on loopback). The range is exact, a missing object is RemoteResourceNotFoundError naming its
key, and a signature the store refuses (expired) is signed anew once."""

from __future__ import annotations

import time
import uuid

import pytest

from kcli.storage.remote import (
    FsspecRemoteStorageManager,
    RemoteResourceNotFoundError,
    RemoteSegmentRef,
    RemoteStorageError,
)

pytestmark = pytest.mark.broker_process  # the session's SeaweedFS is a process


@pytest.fixture
def s3(s3_store):
    bucket = s3_store.new_bucket()
    rsm = FsspecRemoteStorageManager(f"s3://{bucket}/tiered", **s3_store.storage_options())
    ref = RemoteSegmentRef("t", uuid.UUID(int=7), 0, uuid.uuid4(), 100)
    payload = bytes(range(256)) * 1024  # 256 KiB, every byte's position visible in its value
    rsm.copy_log_segment_data(ref, {"log": payload, "index": b"\x00" * 8})
    return rsm, ref, payload


def test_ranges_are_read_on_presigned_urls(s3):
    rsm, ref, payload = s3
    assert rsm.presigned is not None  # s3fs: the fast path, not cat_file
    assert rsm.fetch_log_segment(ref, 1000, 70_000) == payload[1000:70_000]
    assert rsm.fetch_log_segment(ref, 200_000) == payload[200_000:]
    assert rsm.fetch_log_segment(ref, 0, 1) == payload[:1]
    assert rsm.fetch_log_segment(ref, 5, 5) == b""
    assert rsm.fetch_log_segment(ref, len(payload) + 10, len(payload) + 20) == b""  # past the end, as cat_file
    assert rsm.fetch_index(ref, "index") == b"\x00" * 8
    # one signature per object, reused by every later range
    url = rsm.presigned.url(rsm.key(ref, "log"))
    assert "X-Amz-Signature=" in url
    rsm.fetch_log_segment(ref, 0, 10)
    assert rsm.presigned.url(rsm.key(ref, "log")) == url
    # fsspec hands a second manager the same (already used) filesystem: still the fast path
    assert FsspecRemoteStorageManager(rsm.url, **rsm.config.options).presigned is not None
    # a GET that must carry more than its URL (requester pays) keeps s3fs's path
    assert FsspecRemoteStorageManager(rsm.url, **rsm.config.options, requester_pays="true").presigned is None
    # the same bytes as s3fs's own path
    key = rsm.key(ref, "log")
    assert bytes(rsm.fs.cat_file(key, start=1000, end=70_000)) == rsm.fetch_log_segment(ref, 1000, 70_000)


def test_a_missing_object_names_its_key(s3):
    rsm, ref, _ = s3
    gone = RemoteSegmentRef(ref.topic, ref.topic_id, ref.partition, uuid.uuid4(), ref.start_offset)
    with pytest.raises(RemoteResourceNotFoundError) as caught:
        rsm.fetch_log_segment(gone, 0, 100)
    assert caught.value.path == rsm.display_key(gone, "log")
    assert rsm.display_key(gone, "log") in str(caught.value)
    assert "NoSuchKey" in str(caught.value)
    with pytest.raises(RemoteResourceNotFoundError, match="snapshot"):
        rsm.fetch_index(gone, "snapshot")


def test_an_expired_signature_is_signed_anew(s3):
    rsm, ref, payload = s3
    presigned = rsm.presigned
    key = rsm.key(ref, "log")
    presigned.expires_s = 1  # X-Amz-Expires=1: the store refuses the URL a second later
    stale = presigned.url(key, fresh=True)
    with presigned._lock:  # kept as if still good: the store, not the cache, finds it expired
        presigned._urls[key] = (stale, float("inf"))
    time.sleep(2.1)
    presigned.expires_s = 3600
    assert rsm.fetch_log_segment(ref, 10, 20) == payload[10:20]
    assert presigned.resigned == 1
    assert presigned.url(key) != stale


def test_a_refused_signature_twice_is_an_error_naming_the_object(s3):
    rsm, ref, _ = s3
    key = rsm.key(ref, "log")
    # a secret the store does not know: every signature is refused, re-signed once, then the error
    bad = FsspecRemoteStorageManager(rsm.url, **{**rsm.config.options, "secret": "not-the-secret"})
    with pytest.raises(RemoteStorageError) as caught:
        bad.fetch_log_segment(ref, 0, 10)
    assert not isinstance(caught.value, RemoteResourceNotFoundError)
    assert caught.value.path == rsm.fs.unstrip_protocol(key)
    assert "HTTP 403" in str(caught.value)
    assert bad.presigned.resigned == 1


def test_an_unreachable_store_is_a_storage_error(s3):
    rsm, ref, _ = s3
    from broker_support import free_port

    dead = FsspecRemoteStorageManager(rsm.url, **{**rsm.config.options,
                                                  "endpoint_url": f"http://127.0.0.1:{free_port()}"})
    with pytest.raises(RemoteStorageError) as caught:
        dead.fetch_log_segment(ref, 0, 10)
    assert caught.value.path == dead.display_key(ref, "log")
