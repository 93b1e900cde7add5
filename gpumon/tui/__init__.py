"""The Textual dashboard: thin views over snapshots from a SnapshotSource (the only layer that imports Textual)."""
