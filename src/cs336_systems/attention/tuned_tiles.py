"""Tile settings chosen by ``python -m cs336_systems.attention.tune`` (generated; do not edit).

Keyed "<dtype>_d<head dim>"; shapes without an entry use ``flash_triton.default_tiles``.
"""
TUNED: dict = {}
