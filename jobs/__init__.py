"""offsetlake's Spark job: source -> raw records -> decode -> replay -> expiry -> lag -> sink.

Each step is one module; `pipeline.run` wires them together and `cli` is the thin command line.
"""
