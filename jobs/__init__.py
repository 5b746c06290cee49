"""offsetlake: rebuild Kafka consumer-group state from `__consumer_offsets` into Delta tables.

The flow is the folder layout: sources (plan and read the log) -> decode (check every record) -> replay (the
group coordinator's rules, per coordinator partition) -> derive (what needs every partition: lag, Burrow's
status) -> lake (the sink, the run record, the lock). engine runs the kernel (a local pool or Spark), readers
answer from the tables without Spark, tools make samples, dumps and benches; base is the ground floor they all
stand on (storage, schemas, Arrow helpers, errors), importing nothing of the project. `pipeline.run` strings
the passes together; `cli` and `__main__` (spark-submit) only parse and print. docs/design.md says where each
rule lives.
"""
