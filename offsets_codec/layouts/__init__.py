"""Layout declarations, one module per group family. Declarations only: no code, no type ids.

Each layout follows Kafka's JSON message schema of the same name in
``group-coordinator/src/main/resources/common/message/`` (spec §4); the history of a schema is kept
as comments beside it, the way Kafka's schema files do.
"""
