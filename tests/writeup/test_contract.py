"""A contract (``report.contract``) serialises to the keys and order it declares, and its schema
declares those keys with their types, less the ``Unread`` ones."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated

import jsonschema
import pytest

from cs336_systems.report import contract
from cs336_systems.report.contract import Declared, Summary, Unread


@dataclass(frozen=True)
class Step:
    from_: int
    to: int
    note: Unread[str]


Block = Annotated[dict, Declared({"type": "object", "required": ["x"]})]


@dataclass(frozen=True)
class Toy(Summary):
    steps: list[Step]
    by_dtype: dict[str, float | None]
    either: bool | float
    block: Block


def _toy(**change) -> Toy:
    return Toy(**({"provenance": {}, "steps": [Step(1, 2, "n")], "by_dtype": {"bf16": None}, "either": True,
                   "block": {"x": 1}} | change))


def test_a_contract_serialises_to_its_keys_in_their_order(tmp_path):
    contract.write(tmp_path / "summary.json", _toy())
    assert (tmp_path / "summary.json").read_text() == json.dumps(
        {"provenance": {}, "steps": [{"from": 1, "to": 2, "note": "n"}], "by_dtype": {"bf16": None}, "either": True,
         "block": {"x": 1}}, indent=2) + "\n"


def test_its_schema_declares_every_key_but_the_unread():
    schema = contract.json_schema(Toy)
    step = schema["properties"]["steps"]["items"]
    assert step["required"] == ["from", "to"] and "note" not in step["properties"]
    assert schema["properties"]["by_dtype"]["additionalProperties"] == {"type": ["number", "null"]}
    assert schema["properties"]["either"] == {"type": ["boolean", "number"]}
    assert schema["properties"]["block"] == {"type": "object", "required": ["x"]}


@pytest.mark.parametrize("change", [{"either": "yes"}, {"steps": [{"to": 2}]}, {"block": {}}])
def test_its_schema_refuses_what_the_contract_does_not_hold(change):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(contract.as_json(_toy()) | change, contract.json_schema(Toy))
