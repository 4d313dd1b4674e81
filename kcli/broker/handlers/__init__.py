"""Request handlers, one module per API family: a decoded kio request and a RequestContext in, a kio response
out. Handlers never touch sockets or another module's private state; they call the broker's services
(ReplicaManager, TopicAdmin, GroupCoordinator, MetadataCache) and map typed errors with
`kcli.broker.errors.error_code_for`. The dispatch table is `kcli.broker.kafka_apis`.
"""
