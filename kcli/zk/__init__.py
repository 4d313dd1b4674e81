"""ZooKeeper mode: the znodes a Kafka broker (<= 3.9) keeps in ZooKeeper. The only package that imports kazoo.

``paths`` builds every znode path and parses ``zookeeper.connect``; ``registration`` registers a broker,
its controller claim and its topics (see shared/docs/kafka-formats.md section 8 for the JSON layouts).
"""
