"""Where Spark runs: the only SparkSession builder, its JVM settings, and the figures of its work."""
