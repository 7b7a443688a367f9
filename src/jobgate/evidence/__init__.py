"""Evidence: the audit chain's anchors and their sinks, signed bundles, evidence keys, timestamps,
replay from the record alone, and retention."""
