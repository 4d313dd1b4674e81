"""The ``kafka-log`` data source's name and column contract (no pyspark here: ``kctl scan`` and other readers
build on it without the extra installed)."""

FORMAT = "kafka-log"

# The contract: names, types and order are fixed. Names shared with Spark's own Kafka source (topic,
# partition, offset, timestamp, timestampType, key, value, headers) mean the same thing there.
SCHEMA = (
    "topic string, partition int, offset long, timestamp timestamp, timestampType int, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>, magic int, codec string, producer_id long, producer_epoch int, "
    "sequence int, is_transactional boolean, is_control boolean, segment string, position long"
)
CORRUPT_COLUMN = "_corrupt"
PERMISSIVE_SCHEMA = SCHEMA + f", {CORRUPT_COLUMN} string"  # mode=PERMISSIVE only

# Spark 4.1+ refuses a Python reader that implements pushFilters unless this is on.
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
