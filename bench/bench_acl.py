#!/usr/bin/env python3
"""The cost of one AclAuthorizer.authorize() call with 10,000 ACLs, against a linear scan of all of them.

Three populations of 10,000 ACLs on topics (each ACL on its own resource pattern, as `kafka-acls --add` per topic
or per prefix makes them): all LITERAL, all PREFIXED (prefix lengths 4..40, so a lookup probes up to 37 lengths),
and half and half. For each, the time per authorize() for a principal and topic that an ACL allows (a hit) and one
that nothing allows (a miss, denied), measured in the same run as a baseline that decides the same question by
scanning every ACL (what an authorizer without an index does). The ratio baseline/ours is the point: the
authorizer's lookup (a dict probe per literal pattern, one per prefix length in use) must not grow with the
number of ACLs. The cache is filled directly (as Kafka's AclAuthorizerBenchmark does), not through the store.

Usage: bench/bench_acl.py [--acls 10000] [--calls 20000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kcli.broker.security import KafkaPrincipal, Session  # noqa: E402
from kcli.broker.security.authorizer import AclAuthorizer  # noqa: E402
from kcli.broker.security.local_store import LocalMetadataStore  # noqa: E402
from kcli.protocol.acl import (AccessControlEntry, AclOperation, AclPermissionType, PatternType,  # noqa: E402
                               ResourcePattern, ResourceType)

SESSION = Session(KafkaPrincipal("User", "alice"), client_address="10.0.0.7")


def population(kind: str, count: int, rng: random.Random) -> list[tuple[ResourcePattern, AccessControlEntry]]:
    out = []
    for i in range(count):
        prefixed = kind == "prefixed" or (kind == "mixed" and i % 2)
        if prefixed:
            stem = f"p{i:05d}-"
            name = (stem + "x" * 40)[:max(len(stem), rng.randint(4, 40))]
        else:
            name = f"topic-{i:05d}"
        principal = "User:alice" if i % 10 == 0 else f"User:u{i}"
        out.append((ResourcePattern(ResourceType.TOPIC, name, PatternType.PREFIXED if prefixed else
                                    PatternType.LITERAL),
                    AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW)))
    return out


def scan_authorize(acls, principal: str, host: str, op: AclOperation, name: str) -> bool:
    """The baseline: every ACL looked at, same decision as the authorizer (4.2)."""
    applies = [e for p, e in acls if p.name == name and p.pattern_type == PatternType.LITERAL
               or p.name == "*" and p.pattern_type == PatternType.LITERAL
               or p.pattern_type == PatternType.PREFIXED and name.startswith(p.name)]
    if not applies:
        return False
    who, where = (principal, "User:*"), (host, "*")
    if any(e.permission_type == AclPermissionType.DENY and e.principal in who and e.host in where
           and e.operation in (op, AclOperation.ALL) for e in applies):
        return False
    return any(e.permission_type == AclPermissionType.ALLOW and e.principal in who and e.host in where
               and e.operation in (op, AclOperation.ALL) for e in applies)


def per_call_us(fn, calls: int) -> float:
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=20_000, help="authorize() calls per measurement")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = random.Random(25)
    rows = []
    for kind in ("literal", "prefixed", "mixed"):
        acls = population(kind, args.acls, rng)
        authorizer = AclAuthorizer(LocalMetadataStore(None))
        grouped: dict[ResourcePattern, set] = {}
        for pattern, entry in acls:
            grouped.setdefault(pattern, set()).add(entry)
        for pattern, entries in grouped.items():
            authorizer._update_cache(pattern, frozenset(entries), 0)
        hit_pattern = next(p for p, e in reversed(acls) if e.principal == "User:alice")
        hit = hit_pattern.name + ("-orders" if hit_pattern.pattern_type == PatternType.PREFIXED else "")
        miss = "zz-no-acl-here-" + "y" * 30
        scan_calls = max(20, args.calls // 200)
        for case, topic, expected in (("hit", hit, True), ("miss", miss, False)):
            assert authorizer.authorize(SESSION, AclOperation.READ, ResourceType.TOPIC, topic) is expected
            assert scan_authorize(acls, "User:alice", "10.0.0.7", AclOperation.READ, topic) is expected
            ours = per_call_us(lambda: authorizer.authorize(SESSION, AclOperation.READ, ResourceType.TOPIC, topic),
                               args.calls)
            scan = per_call_us(lambda: scan_authorize(acls, "User:alice", "10.0.0.7", AclOperation.READ, topic),
                               scan_calls)
            probes = 2 + sum(1 for n in authorizer._prefix_lengths.get(int(ResourceType.TOPIC), ())
                             if n <= len(topic))
            rows.append({"acls": kind, "case": case, "topic": topic, "authorize_us": round(ours, 2),
                         "linear_scan_us": round(scan, 1), "ratio": round(scan / ours, 1), "dict_probes": probes})
    print(f"authorize() with {args.acls:,} ACLs on topics (median of 3 runs; linear scan = the same decision over "
          "every ACL)")
    print(f"{'ACLs':<9} {'case':<5} {'authorize µs':>13} {'scan µs':>10} {'scan/ours':>10} {'probes':>7}")
    for r in rows:
        print(f"{r['acls']:<9} {r['case']:<5} {r['authorize_us']:>13.2f} {r['linear_scan_us']:>10.1f} "
              f"{r['ratio']:>9.0f}x {r['dict_probes']:>7}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
