"""Memory: activation checkpointing (A6), snapshots, timelines and allocation analysis (A5)."""
