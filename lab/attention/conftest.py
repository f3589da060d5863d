"""The lab's tests import its scripts as top-level modules (``import probe``, ``import flash_gluon``),
as ``python lab/attention/probe.py`` does, because this folder is not a package: put it on the path.

They need nothing else of tests/conftest.py: the Gluon tests skip where they cannot run (no sm_90
GPU, another Triton than 3.6) and seed their own inputs, so ``pytest lab`` works alone too.
"""
import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
