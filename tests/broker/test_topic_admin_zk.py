"""TopicAdmin in ZooKeeper mode against the session's real ZooKeeper: a replica's log takes its topic's configs
from /config/topics/<t>, whatever this broker tried itself (Kafka's LogManager reads them when it creates a log)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kcli.broker.config import load_config
from kcli.broker.log_manager import LogManager
from kcli.broker.metadata_cache import BrokerEndpoint, MetadataCache
from kcli.broker.replica_manager import ReplicaManager
from kcli.broker.topic_admin import TopicAdmin
from kcli.storage.checkpoint import uuid_from_base64
from kcli.storage.log import LogConfig
from kcli.zk.kafka_zk_client import KafkaZkClient, TopicExistsError

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def admin(tmp_path, zookeeper, chroot, chrooted_zk):
    config = load_config(overrides=[f"log.dirs={tmp_path / 'logs'}", "broker.id=0", "min.insync.replicas=2",
                                    f"zookeeper.connect={zookeeper.connect}{chroot}"])
    logs = LogManager(config.log_dirs, broker_id=0, log_config=LogConfig())
    metadata = MetadataCache(controller_id=0)
    metadata.add_broker(BrokerEndpoint(0, "127.0.0.1", 9092))
    admin = TopicAdmin(config, logs, ReplicaManager(logs, local_broker_id=0), metadata,
                       zk=KafkaZkClient(chrooted_zk, timeout=10))
    logs.startup()
    admin.load()
    yield admin
    logs.shutdown()


def _replica(admin: TopicAdmin, name: str, topic_id: uuid.UUID):
    asyncio.run(admin.prepare_replicas([(name, 0)], {name: topic_id}))
    return admin.ensure_replica(name, 0, topic_id, create=False)


def test_a_failed_auto_creation_leaves_no_configs_behind(admin):
    """An auto-creation (Metadata) racing another broker's CreateTopics of the same name loses in ZooKeeper; the
    replica's log must still get the winner's min.insync.replicas=1, not the broker default of 2."""
    topic_id = uuid_from_base64(admin.zk.create_topic("racy", {0: [0]}, configs={"min.insync.replicas": "1"}))
    creation = admin.begin_create_topic("racy", -1, -1, {0: [0]})  # not in this broker's metadata yet: it tries
    with pytest.raises(TopicExistsError):
        creation.run()
    admin._release(creation)
    assert _replica(admin, "racy", topic_id).log.config.min_insync_replicas == 1


def test_a_topic_created_again_gets_its_new_configs(admin):
    """A topic deleted here and created again under the same name brings its own configs, not the old ones."""
    first = uuid_from_base64(admin.zk.create_topic("again", {0: [0]}, configs={"min.insync.replicas": "1"}))
    assert _replica(admin, "again", first).log.config.min_insync_replicas == 1
    admin.replicas.stop_replica("again", 0, -2)  # StopReplica(delete=true), as the controller's deletion sends
    admin.delete_replica("again", 0)
    admin.zk.set_topic_config("again", {"min.insync.replicas": "3"})  # the new topic's configs
    second = uuid.uuid4()
    assert _replica(admin, "again", second).log.config.min_insync_replicas == 3


def test_an_existing_topic_is_let_go_whoever_refused_it():
    """The broker's and ZooKeeper's "already exists" both count (the internal topics' creators log nothing then),
    other refusals do not."""
    from kcli.broker.errors import InvalidTopicError, TopicExistsError as BrokerTopicExists, topic_exists

    assert topic_exists(BrokerTopicExists("Topic 't' already exists."))
    assert topic_exists(TopicExistsError("Topic 't' already exists."))
    assert not topic_exists(InvalidTopicError("bad name"))
    assert not topic_exists(ValueError("TOPIC_ALREADY_EXISTS"))
