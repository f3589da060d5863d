"""Tile settings chosen by ``python -m cs336_systems.attention.tune`` (generated; do not edit).

Keyed "<dtype>_d<head dim>"; shapes without an entry use ``flash_triton.default_tiles``.
"""
TUNED: dict = {'bf16_d64': {'measured': {'causal': True,
                           'default_ms': {'dkdv': 2.4566, 'dq': 1.5997, 'forward': 1.5948},
                           'gpu': 'NVIDIA H100 80GB HBM3',
                           'ms': {'dkdv': 2.3839, 'dq': 1.492, 'forward': 1.3917},
                           'shape': [16, 16384, 64]},
              'tiles': {'dkdv': {'block_k': 64, 'block_q': 64, 'num_stages': 3, 'num_warps': 4},
                        'dq': {'block_k': 64, 'block_q': 128, 'num_stages': 3, 'num_warps': 8},
                        'forward': {'block_k': 64,
                                    'block_q': 128,
                                    'num_stages': 4,
                                    'num_warps': 8}}}}
