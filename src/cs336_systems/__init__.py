"""cs336_systems."""
