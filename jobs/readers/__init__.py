"""Commands that read the tables of the newest complete run, without Spark: sql, show, describe, reset-offsets."""
