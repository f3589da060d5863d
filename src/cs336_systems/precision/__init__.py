"""Precision experiments: accumulation (A3) and autocast dtypes (A4)."""
