"""probe.py's output says what made it (the probes themselves need an H100)."""
from __future__ import annotations

import json

import probe


def test_probe_output_carries_its_arguments_and_provenance(capsys, monkeypatch):
    monkeypatch.setenv("CS336_GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567")
    monkeypatch.setenv("CS336_GIT_DIRTY", "0")
    assert probe._print({"rows": [1, 2]}, ["--backward-splits", "--rep-ms", "50"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows"] == [1, 2]
    assert out["argv"] == ["--backward-splits", "--rep-ms", "50"]
    assert out["provenance"]["commit"] == "0123456789abcdef0123456789abcdef01234567"
    assert out["provenance"]["dirty"] is False
