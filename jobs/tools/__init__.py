"""Tools around the job: a sample dump, a Parquet dump of a source, and the benchmark."""
