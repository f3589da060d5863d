"""lab/paired/verdicts.py: pairs inside a job, matched across two runs, their verdicts counted."""
import importlib.util
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("paired_verdicts", HERE / "verdicts.py")
verdicts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(verdicts)


def _write(folder, name, job, params, centres, rng, ident="A1", status="ok"):
    rounds = [{"step": [c + rng.gauss(0, 0.05) for _ in range(3)]} for c in centres]
    record = {"id": ident, "params": params, "status": status, "provenance": {},
              "metrics": {"turns": {"job": job}, "rounds": rounds}}
    path = folder / ident / "records" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def _run(folder, rng, bf16_gap):
    drift = [rng.uniform(90, 130) for _ in range(6)]      # the judge decides from 5 rounds
    for mode, job in (("forward", "j1"), ("train-step", "j2")):
        _write(folder, f"small_{mode}_fp32", job + folder.name, {"size": "small", "mode": mode, "precision": "fp32"},
               drift, rng)
        _write(folder, f"small_{mode}_bf16", job + folder.name, {"size": "small", "mode": mode, "precision": "bf16"},
               [d + bf16_gap[mode] for d in drift], rng)


def test_pairs_hold_the_point_equal_and_two_runs_agree_where_the_effect_is_real(tmp_path, capsys):
    rng = random.Random(5)
    gaps = {"forward": -10.0, "train-step": 0.0}       # bf16 clearly faster forward, no effect in train-step
    one, two = tmp_path / "one", tmp_path / "two"
    _run(one, rng, gaps)
    _run(two, rng, gaps)
    pairs = verdicts.pairs_of(one)
    # fp32 vs bf16 per mode only: forward is never paired with train-step, although they share no job anyway
    assert len(pairs) == 2 and all(k[1].split("_")[1] == k[2].split("_")[1] for k in pairs)
    v1, v2 = verdicts.verdicts(one), verdicts.verdicts(two)
    forward = next(k for k in v1 if "forward" in k[1])
    assert forward[1].endswith("bf16.json#0")          # pairs are ordered by place: bf16 against fp32
    assert v1[forward]["verdict"] == v2[forward]["verdict"] == "lower"
    train = next(k for k in v1 if "train-step" in k[1])
    assert v1[train]["verdict"] == "within the spread"
    table = verdicts.agreement(v1, v2)
    assert table["A1"]["pairs"] == 2 and table["A1"]["decided_1"] >= 1
    assert verdicts.main([str(one), str(two)]) == 0
    assert "| A1 | 2 |" in capsys.readouterr().out


def test_records_of_different_jobs_are_not_paired_and_no_common_pair_fails(tmp_path):
    rng = random.Random(6)
    _write(tmp_path / "r", "a", "x", {"size": "s", "precision": "fp32"}, [1, 1, 1], rng)
    _write(tmp_path / "r", "b", "y", {"size": "s", "precision": "bf16"}, [1, 1, 1], rng)
    assert verdicts.pairs_of(tmp_path / "r") == {}
    (tmp_path / "empty").mkdir()
    assert verdicts.main([str(tmp_path / "r"), str(tmp_path / "empty")]) == 1


def test_steadiness_is_the_farthest_round_from_the_median_of_rounds(tmp_path, capsys):
    rng = random.Random(7)
    _write(tmp_path / "r", "xl_fp32", "j", {"size": "xl", "precision": "fp32"}, [100.0, 101.0, 99.0, 104.0], rng)
    spreads = verdicts.round_spreads(tmp_path / "r", "A1/records/xl_*.json")
    centre, share, n = spreads["A1/records/xl_fp32.json#0"]
    assert n == 4 and abs(centre - 100.5) < 0.2 and abs(share - 3.5 / 100.5) < 0.004


def _kernel_record(folder, name, job, impl, graph_ms, launch_ms, rng, with_graph=True):
    """A B5-like record: per round a do_bench median carrying the host's launch time (``ms``) and, where
    graph-timed, the GPU time alone (``graph_ms``)."""
    rounds = []
    for g, launch in zip(graph_ms, launch_ms):
        r = {"ms": [g + launch]}
        if with_graph:
            r["graph_ms"] = [g + rng.gauss(0, 0.0005)]
        rounds.append(r)
    record = {"id": "B5", "params": {"impl": impl, "seq": 128, "d": 64, "dtype": "bf16", "pass": "forward"},
              "status": "ok", "provenance": {}, "metrics": {"turns": {"job": job}, "rounds": rounds}}
    path = folder / "B5" / "records" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_a_kernel_pair_is_judged_on_graph_time_where_both_sides_have_it_as_its_report_judges(tmp_path):
    rng = random.Random(8)
    # ours is 10 % faster on the GPU every round; the launch time the host adds flips do_bench's medians
    _kernel_record(tmp_path, "ours", "j", "ours", [0.090] * 6, [0.05, 0.01] * 3, rng)
    _kernel_record(tmp_path, "plain", "j", "plain", [0.100] * 6, [0.01, 0.05] * 3, rng)
    (found,) = verdicts.verdicts(tmp_path).values()
    assert found["timed"] == "graph_ms" and found["verdict"] == "lower"
    # one side without graph time: both are judged on do_bench's median, here within its spread
    _kernel_record(tmp_path, "plain", "j", "plain", [0.100] * 6, [0.01, 0.05] * 3, rng, with_graph=False)
    (found,) = verdicts.verdicts(tmp_path).values()
    assert found["timed"] == "ms" and found["verdict"] == "within the spread"


def test_agreement_prints_the_issue_s_line_from_a_folder_of_two_runs(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("paired_agreement", HERE / "agreement.py")
    agreement = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agreement)
    rng = random.Random(8)
    gaps = {"forward": -10.0, "train-step": 0.0}
    _run(tmp_path / "a", rng, gaps)
    _run(tmp_path / "b", rng, {"forward": 10.0, "train-step": 0.0})      # the second run turned around
    assert agreement.main([str(tmp_path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("1 of 2 verdicts agree, 1 opposite, decided ")


def test_the_a_a_check_finds_a_configuration_entered_twice_and_judges_it(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("paired_aa", HERE / "aa.py")
    aa = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(aa)
    rng = random.Random(9)
    drift = [rng.uniform(90, 130) for _ in range(8)]
    params = {"size": "xl", "rung": "cuda-graphs"}
    _write(tmp_path, "a", "j", params, drift, rng, ident="E1")
    _write(tmp_path, "b", "j", params | {"again": True}, drift, rng, ident="E1")
    _write(tmp_path, "c", "j", {"size": "xl", "rung": "fused-adamw"}, [d + 30 for d in drift], rng, ident="E1")
    _write(tmp_path, "d", "other-job", params | {"again": True}, drift, rng, ident="E1")
    pairs = aa.aa_pairs(tmp_path)
    assert [(p[0], p[1]) for p in pairs] == [("E1/records/a.json#0", "E1/records/b.json#0")]
    assert aa.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # whether this one pair is called different is the 5 % the judge allows; the count says which
    called = 1 if "): higher" in out or "): lower" in out else 0
    assert out.strip().endswith(f"called different in {called} of 1 A/A pairs") and "8 rounds, 2 set aside" in out
    (tmp_path / "empty").mkdir()
    assert aa.main([str(tmp_path / "empty")]) == 1


def test_the_variants_inside_one_record_are_paired_a_phase_at_a_time(tmp_path):
    """B2(b)'s record holds eager and compiled, which took turns in one job: a pair each phase."""
    rng = random.Random(10)
    drift = [rng.uniform(90, 130) for _ in range(6)]
    variants = {name: {"status": "ok", "turns": {"job": "j"},
                       "rounds": [{"forward": [d + gap + rng.gauss(0, 0.05)], "optimizer": [5.0 + rng.gauss(0, 0.05)]}
                                  for d in drift]}
                for name, gap in (("eager", 30.0), ("compiled", 0.0))}
    variants["broken"] = {"status": "oom"}
    record = {"id": "B2", "params": {"size": "xl", "mode": "train-step"}, "status": "ok", "provenance": {},
              "metrics": {"variants": variants}}
    path = tmp_path / "B2" / "whole_model" / "xl_train-step.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    found = verdicts.verdicts(tmp_path)
    assert sorted(k[1] for k in found) == ["B2/whole_model/xl_train-step.json#0/compiled:forward",
                                           "B2/whole_model/xl_train-step.json#0/compiled:optimizer"]
    by_phase = {k[1].rsplit(":", 1)[1]: v["verdict"] for k, v in found.items()}
    assert by_phase["forward"] == "lower"                  # compiled against eager, 30 ms faster every round
    assert by_phase["optimizer"] == "within the spread"


def test_a_longer_job_says_what_its_first_rounds_would_have_decided(tmp_path):
    rng = random.Random(11)
    _run(tmp_path / "r", rng, {"forward": -10.0, "train-step": 0.0})
    full = verdicts.verdicts(tmp_path / "r")
    five = verdicts.verdicts(tmp_path / "r", rounds=5)
    four = verdicts.verdicts(tmp_path / "r", rounds=4)
    forward = next(k for k in full if "forward" in k[1])
    assert full[forward]["rounds"] == 6 and five[forward]["rounds"] == 5 and five[forward]["verdict"] == "lower"
    assert four[forward]["verdict"] == "not settled"       # the judge decides nothing below 5 rounds


def test_the_settling_step_is_set_against_the_timed_steps_of_its_turns(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("paired_settle", HERE / "settle.py")
    settle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(settle)
    rng = random.Random(12)
    _write(tmp_path, "a", "j", {"size": "xl", "precision": "fp32"}, [100.0] * 5, rng)
    path = tmp_path / "A1" / "records" / "a.json"
    record = json.loads(path.read_text())
    record["metrics"]["settle_ms_per_round"] = [[150.0], [120.0], [100.0], [110.0], [300.0]]
    path.write_text(json.dumps(record))
    _write(tmp_path, "b", "j", {"size": "xl", "precision": "bf16"}, [50.0] * 5, rng)      # no settling times
    (row,) = settle.settle_rows(tmp_path)
    assert row["place"] == "A1/records/a.json#0" and row["settle_ms"] == 120.0
    assert abs(row["ratio"] - 1.2) < 0.01 and abs(row["largest"] - 3.0) < 0.02
    assert settle.main([str(tmp_path)]) == 0 and "| A1/records/a.json#0 | 120.00 |" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert settle.main([str(tmp_path / "empty")]) == 1


def test_settling_tried_moves_the_settling_step_into_the_turn_only_where_the_rule_stops_it():
    """A record that settled every turn, judged as the settling rule would have timed it: after the trial
    rounds an entrant whose settling bought nothing takes its settling step as its first timed step; one
    whose settling cost more keeps its rounds as they were."""
    cheap = {"id": "A1", "params": {}, "metrics": {
        "rounds": [{"step": [10.0, 10.2]} for _ in range(5)],
        "settle_ms_per_round": [[10.1], [10.0], [9.0], [9.5], [11.0]]}}
    tried = verdicts.tried_settling(cheap)
    assert [r["step"] for r in tried["metrics"]["rounds"]] == [[10.0, 10.2]] * 2 + [[9.0, 10.0], [9.5, 10.0], [11.0, 10.0]]
    assert cheap["metrics"]["rounds"][2]["step"] == [10.0, 10.2]        # the record read is left as it was
    dear = {"id": "E1", "params": {}, "metrics": {
        "rounds": [{"step": [10.0]} for _ in range(5)], "settle_ms_per_round": [[25.0]] * 5}}
    assert verdicts.tried_settling(dear) is dear
    unsettled = {"id": "B5", "params": {}, "metrics": {"rounds": [{"graph_ms": [1.0]}] * 5}}
    assert verdicts.tried_settling(unsettled) is unsettled


def test_the_gpu_bound_points_are_the_issue_s():
    def rec(**params):
        return {"params": params}
    assert verdicts.gpu_bound("A1", rec(size="xl", context=512), rec(size="xl", context=512), "step")
    assert not verdicts.gpu_bound("A1", rec(size="xl", context=256), rec(size="xl", context=256), "step")
    assert not verdicts.gpu_bound("A1", rec(size="small", context=1024), rec(size="small", context=1024), "step")
    graphed, anchor, eager = rec(cuda_graphs=True, anchor=False), rec(cuda_graphs=False, anchor=True), rec(cuda_graphs=False)
    assert verdicts.gpu_bound("E1", graphed, anchor, "step") and verdicts.gpu_bound("E1", anchor, graphed, "step")
    assert not verdicts.gpu_bound("E1", graphed, eager, "step") and not verdicts.gpu_bound("E1", eager, anchor, "step")
    assert not verdicts.gpu_bound("E1", graphed, graphed, "step")
    assert verdicts.gpu_bound("B5", rec(), rec(), "graph_ms") and not verdicts.gpu_bound("B5", rec(), rec(), "ms")
