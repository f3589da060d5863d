"""A contract (``report.contract``) serialises to the keys and order it declares, and its schema
declares those keys with their types, less the ``Unread`` ones."""
from __future__ import annotations

import json
from dataclasses import dataclass
import jsonschema
import pytest

from cs336_systems.records import make_record
from cs336_systems.report import contract
from cs336_systems.report.common import run_provenance
from cs336_systems.report.contract import Summary, Unread


PROVENANCE = run_provenance([make_record("Z1", {}, "ok", {})])


@dataclass(frozen=True)
class Step:
    from_: int
    to: int
    note: Unread[str]


@dataclass(frozen=True)
class Toy(Summary):
    steps: list[Step]
    by_dtype: dict[str, float | None]
    either: bool | float


def _toy(**change) -> Toy:
    return Toy(**({"provenance": PROVENANCE, "steps": [Step(1, 2, "n")], "by_dtype": {"bf16": None}, "either": True}
                  | change))


def test_a_contract_serialises_to_its_keys_in_their_order(tmp_path):
    contract.write(tmp_path / "summary.json", _toy())
    assert (tmp_path / "summary.json").read_text() == json.dumps(
        {"provenance": contract.as_json(PROVENANCE), "steps": [{"from": 1, "to": 2, "note": "n"}],
         "by_dtype": {"bf16": None}, "either": True}, indent=2) + "\n"


def test_its_schema_declares_every_key_but_the_unread():
    schema = contract.json_schema(Toy)
    step = schema["properties"]["steps"]["items"]
    assert step["required"] == ["from", "to"] and "note" not in step["properties"]
    assert schema["properties"]["by_dtype"]["additionalProperties"] == {"type": ["number", "null"]}
    assert schema["properties"]["either"] == {"type": ["boolean", "number"]}
    # every section's run line: its keys, less the GPU counts only the contents table reads
    assert "gpu_counts" not in schema["properties"]["provenance"]["properties"]
    assert schema["properties"]["provenance"]["properties"]["sittings"]["items"]["required"] == ["label"]


@pytest.mark.parametrize("change", [{"either": "yes"}, {"steps": [{"to": 2}]}, {"by_dtype": {"bf16": "x"}},
                                    {"provenance": {"gpus": []}}])
def test_its_schema_refuses_what_the_contract_does_not_hold(change):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(contract.as_json(_toy()) | change, contract.json_schema(Toy))


def test_filled_from_a_mapping_it_keeps_what_it_declares_and_builds_its_blocks():
    """``contract.fill``: a report's mapping becomes the contract, keys it does not declare left out,
    nested blocks built as their dataclasses, an optional field the mapping lacks None."""
    @dataclass(frozen=True, kw_only=True)
    class Wide(Summary):
        steps: list[Step]
        by_dtype: dict[str, float | None]
        last: Step | None = None

    found = {"provenance": PROVENANCE, "steps": [{"from": 1, "to": 2, "note": "n", "extra": 3}],
             "by_dtype": {"bf16": 0.5}, "unread_by_anyone": 7}
    filled = contract.fill(Wide, found)
    assert filled == Wide(provenance=PROVENANCE, steps=[Step(1, 2, "n")], by_dtype={"bf16": 0.5}, last=None)
    assert "unread_by_anyone" not in contract.as_json(filled)


def test_filling_names_a_required_key_the_mapping_lacks_in_one_line():
    with pytest.raises(contract.ContractError) as e:
        contract.fill(Toy, {"provenance": PROVENANCE, "steps": [{"from": 1, "note": "n"}], "by_dtype": {}, "either": 1},
                      "C9's summary")
    assert str(e.value) == "contract: C9's summary.steps[0] lacks 'to', which Step requires"
