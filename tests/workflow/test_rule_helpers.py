"""What the rules read when a committed run is rebuilt (pipeline.rule_helpers)."""
from cs336_systems.pipeline.rule_helpers import records_in, records_on_disk


def test_a_rebuild_reads_the_records_the_run_has(tmp_path):
    for name in ("b.json", "a.json", "notes.txt"):
        (tmp_path / name).write_text("{}")
    assert records_in(str(tmp_path)) == [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert records_in(str(tmp_path / "absent")) == []
    planned = [str(tmp_path / "a.json"), str(tmp_path / "c.json")]
    assert records_on_disk(planned, rebuilding=True) == [str(tmp_path / "a.json")]
    assert records_on_disk(planned, rebuilding=False) == planned
