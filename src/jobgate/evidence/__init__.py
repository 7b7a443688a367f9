"""Evidence: the audit chain's anchors and the sinks that witness them outside the database, the
evidence keys that sign them, and the timestamps that date them."""
