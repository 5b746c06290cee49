"""The check of records and their decoding into the replay's columns: in bulk over Arrow where the layouts allow
it (arrow_reader), by the Python codec (offsets_codec) everywhere else."""
