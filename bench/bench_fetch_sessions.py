"""Fetch sessions (KIP-227): the broker's CPU per fetch round, full fetches against incremental ones, in one process.

An in-process broker (tests' harness: a KafkaServer with its handlers called directly) hosts ``--partitions``
single-replica topics, ``--busy`` of which get one batch of ``--batch-records`` 1 KiB records before each round;
a consumer-style Fetch v12 (min.bytes 1, no wait) then reads every partition from where the last round left it.
Per round it times the whole of what the broker does for it: decoding the request frame, the handler (the session
lookup, the reads, the answer) and encoding the response frame; the client's side (building the request, decoding
the answer) is the other figure. Full (session id 0, epoch -1: what a client without sessions sends, every partition
named and answered) and incremental rounds alternate in blocks, ``--repeat`` times, and the table shows medians and
incremental / full.

    .venv/bin/python bench/bench_fetch_sessions.py [--partitions 28] [--busy 3] [--rounds 300] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from kio.schema.fetch.v12 import request as fetch_req  # noqa: E402

from inprocess_broker import running_broker  # noqa: E402
from kcli.protocol import ApiKey, decode_request, decode_response, encode_request, minimal_request  # noqa: E402
from kcli.protocol.codec import encode_response_parts  # noqa: E402
from kcli.records import Record, build_record_batch  # noqa: E402


def request(session_id: int, epoch: int, offsets: dict[str, int]) -> fetch_req.FetchRequest:
    return fetch_req.FetchRequest(
        cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=50 << 20,
        isolation_level=0, session_id=session_id, session_epoch=epoch,
        topics=tuple(fetch_req.FetchTopic(topic=t, partitions=(fetch_req.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20),)) for t, o in offsets.items()),
        forgotten_topics_data=(), rack_id="")


async def main(args: argparse.Namespace) -> dict:
    names = [f"p{i:03d}" for i in range(args.partitions)]
    busy = names[: args.busy]
    batch = build_record_batch([Record(i, 1_700_000_000_000, None, b"x" * 1024) for i in range(args.batch_records)])
    results: dict[str, list[dict]] = {"full": [], "incremental": []}
    with tempfile.TemporaryDirectory() as tmp:
        async with running_broker(str(Path(tmp) / "logs")) as b:
            for name in names:
                b.server.admin.create_topic(name, 1, 1)
            offsets = dict.fromkeys(names, 0)
            session = {"id": 0, "epoch": 0}

            async def round_(mode: str) -> tuple[float, float]:
                for name in busy:
                    await b.call(ApiKey.PRODUCE, 9, minimal_request(ApiKey.PRODUCE, 9, topic=name, records=batch,
                                                                     acks=1))
                c0 = time.thread_time()
                if mode == "full":
                    body = request(0, -1, offsets)
                elif session["id"] == 0:
                    body = request(0, 0, offsets)
                else:  # only what moved since the last request: the busy partitions
                    body = request(session["id"], session["epoch"], {n: offsets[n] for n in busy})
                frame = encode_request(ApiKey.FETCH, 12, 1, "bench", body)
                c1 = time.thread_time()
                decoded = decode_request(frame[4:])
                response = await b.call(ApiKey.FETCH, 12, decoded.body)
                parts = encode_response_parts(decoded, response)  # record sets stay file regions (sendfile)
                c2 = time.thread_time()
                out = b"".join(p.read() if hasattr(p, "read") else bytes(p) for p in parts)
                _, answer = decode_response(ApiKey.FETCH, 12, out[4:])
                if mode == "incremental":
                    session["id"], session["epoch"] = int(answer.session_id), (
                        1 if session["id"] != int(answer.session_id) else session["epoch"] + 1)
                for topic in answer.responses:
                    for p in topic.partitions:
                        offsets[topic.topic] = int(p.high_watermark)
                c3 = time.thread_time()
                return c2 - c1, (c1 - c0) + (c3 - c2)

            for rep in range(args.repeat):
                for mode in (("full", "incremental") if rep % 2 == 0 else ("incremental", "full")):
                    session["id"] = 0
                    broker_s, client_s = 0.0, 0.0
                    for _ in range(args.rounds):
                        bs, cs = await round_(mode)
                        broker_s += bs
                        client_s += cs
                    results[mode].append({"broker_us_per_round": 1e6 * broker_s / args.rounds,
                                          "client_us_per_round": 1e6 * client_s / args.rounds})
    return results


def cli() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=28)
    ap.add_argument("--busy", type=int, default=3)
    ap.add_argument("--batch-records", type=int, default=16, help="1 KiB records per busy partition per round")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    results = asyncio.run(main(args))
    print(f"{args.partitions} partitions, {args.busy} with {args.batch_records} x 1 KiB per round; "
          f"{args.rounds} rounds x {args.repeat}, medians (thread CPU)")
    print(f"| figure | full | incremental | incremental / full |\n| --- | ---: | ---: | ---: |")
    for key, label in (("broker_us_per_round", "broker CPU per fetch round, us"),
                       ("client_us_per_round", "client CPU per fetch round, us")):
        full = statistics.median(r[key] for r in results["full"])
        inc = statistics.median(r[key] for r in results["incremental"])
        print(f"| {label} | {full:.0f} | {inc:.0f} | {inc / full:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(cli())
