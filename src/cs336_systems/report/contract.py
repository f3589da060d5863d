"""A section's summary declared once, as frozen dataclasses with type hints: the report fills one,
``write`` serialises it to ``summary.json``, and ``json_schema`` turns the same class into the JSON
Schema the writeup checks that file against before the section's template reads it as ``d``.

A field's key is its name, less a trailing underscore (``from_`` for the key "from"); its type gives
its schema: ``int``, ``float``, ``str``, ``bool``, ``X | None``, a union of those scalars,
``list[X]``, ``dict[K, X]`` (keys that are data: dtypes, variants, cards) and dataclasses (keys that
are names the code chose). ``Unread[X]``: a key the summary keeps for another report or a test, which
the section's words do not read; it is left out of the schema, so a template that reads it fails the
schema test. A key nothing reads is not declared at all. A section's contract subclasses ``Summary``
(whose first block, ``Provenance``, is every section's run line) and is named in its report module's
``CONTRACTS``.

Reports decide, templates word: a report writes ``results/<run>/<ID>/summary.json`` and the section
template ``writeup/templates/sections/<ID>.md.j2`` reads it as ``d``. ``schema_of`` generates a
section's schema from its contract; the writeup checks each summary before it renders it
(``check``), and ``tests/writeup/test_summary_schemas.py`` holds every committed summary to its
schema and every template to reading only what its schema declares.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import types
import typing
from pathlib import Path
from typing import Annotated, Any, TypeVar

import jsonschema

from cs336_systems import deliverables
from cs336_systems.records import write_json_atomic

UNREAD = object()
T = TypeVar("T")
Unread = Annotated[T, UNREAD]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sitting:
    """A stretch of the records' times with no gap over ``common.SITTING_GAP_S``."""
    label: str
    from_: Unread[str]
    to: Unread[str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Provenance:
    """Which machines, commits and dates a section's records came from (``common.run_provenance``):
    every section's first line (templates/sections/_run.md.j2's run_line)."""
    gpus: list[str]
    gpu_counts: Unread[list[int]]       # GPUs each machine had: the writeup's contents table reads it
    hosts: list[str]
    dates: str
    sittings: list[Sitting]
    commits: list[str]
    dirty: bool
    torch: list[str]
    records: int
    statuses: dict[str, int]


@dataclasses.dataclass(frozen=True)
class Summary:
    provenance: Provenance


SCALARS = {int: {"type": "integer"}, float: {"type": "number"}, str: {"type": "string"}, bool: {"type": "boolean"}}


def _nullable(schema: dict) -> dict:
    """``schema`` or null (a schema of any type already admits null)."""
    kinds = schema.get("type")
    if kinds is None:
        return schema
    return {**schema, "type": [*(kinds if isinstance(kinds, list) else [kinds]), "null"]}


def key_of(field: dataclasses.Field) -> str:
    return field.name.removesuffix("_")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def declared_fields(cls: type) -> list[tuple[str, Any]]:
    """The keys ``cls`` declares for the words to read, with their types: every field but the ``Unread``."""
    hints = _hints(cls)
    return [(key_of(f), hints[f.name]) for f in dataclasses.fields(cls)
            if not (typing.get_origin(hints[f.name]) is Annotated and UNREAD in hints[f.name].__metadata__)]


def schema_of_type(hint) -> dict:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return schema_of_type(args[0])
    if hint in SCALARS:
        return SCALARS[hint]
    if hint is Any:
        return {}
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if len(present) == 1:
            inner = schema_of_type(present[0])
        elif all(a in SCALARS for a in present):
            inner = {"type": [SCALARS[a]["type"] for a in present]}
        else:
            raise TypeError(f"contract: a union of more than scalars and None has no schema here: {hint}")
        return _nullable(inner) if len(present) < len(args) else inner
    if origin is list:
        items = schema_of_type(args[0])
        return {"type": "array", "items": items} if items else {"type": "array"}
    if origin is dict:
        # keys that are data; values of type Any are a mapping the section may read any key of
        return {"type": "object", "additionalProperties": schema_of_type(args[1])}
    if dataclasses.is_dataclass(hint):
        # the title names the class, so a test can tell one class's keys wherever the class is used
        keys = declared_fields(hint)
        return {"type": "object", "required": [key for key, _ in keys],
                "properties": {key: schema_of_type(h) for key, h in keys},
                "title": f"{hint.__module__}.{hint.__qualname__}"}
    raise TypeError(f"contract: no schema for the type {hint!r}")


def json_schema(contract: type[Summary]) -> dict:
    """The JSON Schema (draft 2020-12) of the summaries ``contract`` serialises to."""
    return {**schema_of_type(contract), "$schema": "https://json-schema.org/draft/2020-12/schema"}


def as_json(value):
    """``value`` as JSON holds it: a dataclass as an object of its fields' keys, in their order."""
    if dataclasses.is_dataclass(value):
        return {key_of(f): as_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    return value


class ContractError(ValueError):
    pass


def fill(cls: type[T], found: dict, where: str = "d") -> T:
    """Contract ``cls`` filled from the mapping a report built (the data-parallel reports, which merge
    and share their blocks as mappings, and A1, A2, A4): each field from its key, a dataclass, list or
    dict of them filled in turn, keys the contract does not declare left out. A key the mapping lacks
    takes the field's default; lacking one, it fails in one line naming the key (``where``: the path
    to the mapping)."""
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        key = key_of(f)
        if key in found:
            values[f.name] = _filled(hints[f.name], found[key], f"{where}.{key}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ContractError(f"contract: {where} lacks {key!r}, which {cls.__qualname__} requires")
    return cls(**values)


def _filled(hint, value, where: str):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if value is None:
        return None
    if origin is Annotated:
        return _filled(args[0], value, where)
    if dataclasses.is_dataclass(hint):
        # a block already built (``run_provenance``'s) is filled as the summary holds it
        return fill(hint, as_json(value) if dataclasses.is_dataclass(value) else value, where)
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        return _filled(present[0], value, where) if len(present) == 1 else value
    if origin is list:
        return [_filled(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        return {k: _filled(args[1], v, f"{where}.{k}") for k, v in value.items()}
    return value


def write(path: Path, summary: Summary) -> None:
    write_json_atomic(path, as_json(summary))


# --- Finding a section's schema, whichever way it is declared, and checking a summary against it ---

def contract_of(ident: str) -> type[Summary] | None:
    """Section ``ident``'s contract: ``CONTRACTS[ident]`` of the report module the registry names for
    it (None where it declares none). The modules are imported on first use: they import this one."""
    d = deliverables.BY_ID.get(ident)
    return None if d is None else getattr(importlib.import_module(d.report), "CONTRACTS", {}).get(ident)


def declared_in(ident: str) -> str:
    """Where section ``ident``'s summary is declared, as an error names it."""
    contract = contract_of(ident)
    return f"contract: {contract.__name__} in {contract.__module__}"


@functools.cache
def schema_of(ident: str) -> dict | None:
    """Section ``ident``'s schema, generated from its contract (None where it has none)."""
    contract = contract_of(ident)
    return None if contract is None else json_schema(contract)


def schemas() -> dict[str, dict]:
    """Every section's schema, in the registry's order; a section whose report declares none is left out."""
    return {d.id: schema_of(d.id) for d in deliverables.DELIVERABLES if schema_of(d.id) is not None}


class SummaryError(ValueError):
    pass


def check(ident: str, summary: dict, path: Path | str = "summary.json") -> None:
    """Raise ``SummaryError`` with one line naming the section, the file and the first key that is
    missing or of the wrong type, where ``summary`` does not fit section ``ident``'s schema."""
    schema = schema_of(ident)
    if schema is None:
        return
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(summary))
    if error is None:
        return
    where = "d" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        what = f"lacks {where}.{missing}"
    elif error.validator == "type":
        what = f"{where} is {json.dumps(error.instance)[:60]}, not {error.validator_value!r}"
    else:
        what = f"{where}: {error.message[:120]}"
    raise SummaryError(f"writeup: section {ident}: {path} {what} ({declared_in(ident)})")
