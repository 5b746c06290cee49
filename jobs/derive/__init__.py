"""What the replayed state gives once end offsets and topic names are known: lag, Burrow's status, member naming."""
