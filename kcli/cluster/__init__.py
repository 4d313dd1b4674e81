"""Local clusters for trying kctl: ZooKeeper and N brokers on loopback as child processes (`kctl cluster run`).

The brokers run as `python -m kcli broker run` processes: this package starts and watches processes and never
imports the broker itself (only its configuration parser, to refuse a bad --override before anything starts).
"""
