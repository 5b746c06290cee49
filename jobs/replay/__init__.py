"""The kernel: the group coordinator's replay of `__consumer_offsets`, as plain functions over Arrow data, one
module per rule, no Spark import. jobs.engine's runners run them; jobs.replay.partition composes them for one
coordinator partition, as GroupCoordinatorShard.replay does."""
