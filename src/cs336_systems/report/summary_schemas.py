"""The schema of each section's summary: the keys its template reads, with their types.

Reports decide, templates word: a report writes ``results/<run>/<ID>/summary.json`` and the section
template ``writeup/templates/sections/<ID>.md.j2`` reads it as ``d``. Each report module the registry
names (``deliverables.get(ID).report``) declares the summary beside the code that writes it, in one
of two ways: ``CONTRACTS[ID]``, the dataclass the report fills and serialises, whose schema
``report.contract`` generates; or, in a section not converted yet, ``SUMMARY_SCHEMAS[ID]``, a JSON
Schema (draft 2020-12) written with the helpers below, in which every key the template reads is
declared, as deep as the template reads it; a key is required unless the template tests for it
first (``is defined``, ``in``, ``.get``) or a report leaves it out of some summaries. ``schemas()``
collects both, section by section; ``tests/writeup/test_summary_schemas.py`` holds every committed
summary to its schema and every template to reading only what its schema declares; the writeup
checks each summary before it renders it (``check``).

The helpers: ``obj(...)`` an object with those keys (required, unless wrapped in ``opt``),
``mapping(T)`` an object of any keys whose values are T, ``arr(T)`` a list, ``null(T)`` T or null.
A block that several sections share is written once, in the report module that writes it, and
imported by the others.
"""
from __future__ import annotations

import copy
import functools
import importlib
import json
from pathlib import Path

import jsonschema

from cs336_systems import deliverables

NUM = {"type": "number"}
INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
ANY: dict = {}


class opt:
    """A key an object may lack."""

    def __init__(self, schema: dict):
        self.schema = schema


def null(schema: dict) -> dict:
    """``schema`` or null."""
    out = copy.deepcopy(schema)
    types = out.get("type")
    if types is None:
        return out
    out["type"] = [*(types if isinstance(types, list) else [types]), "null"]
    return out


def one_of_types(*schemas: dict) -> dict:
    """Any of these scalar types (a value that is a number in one run and a string in another)."""
    return {"type": [s["type"] for s in schemas]}


def arr(items: dict = ANY) -> dict:
    return {"type": "array", "items": items} if items else {"type": "array"}


def mapping(values: dict = ANY) -> dict:
    return {"type": "object", "additionalProperties": values} if values else {"type": "object"}


def obj(keys: dict | None = None, **more) -> dict:
    """An object with these keys (a dict for keys that are not Python names, keywords for the rest)."""
    props = {**(keys or {}), **more}
    return {"type": "object",
            "required": [k for k, v in props.items() if not isinstance(v, opt)],
            "properties": {k: (v.schema if isinstance(v, opt) else v) for k, v in props.items()}}


def section(**keys) -> dict:
    schema = obj(keys)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


# Every section's first line (templates/sections/_run.md.j2's run_line).
PROVENANCE = obj(gpus=arr(STR), hosts=arr(STR), dates=STR, sittings=arr(obj(label=STR)), commits=arr(STR),
                 dirty=BOOL, torch=arr(STR), records=INT, statuses=mapping(INT))


def declared_in(ident: str) -> str:
    """Where section ``ident``'s summary is declared, as an error names it."""
    report = importlib.import_module(deliverables.get(ident).report)
    if ident in getattr(report, "CONTRACTS", {}):
        return f"contract: {report.CONTRACTS[ident].__name__} in {report.__name__}"
    return f"schema: SUMMARY_SCHEMAS[{ident!r}] in {report.__name__}"


@functools.cache
def schema_of(ident: str) -> dict | None:
    """Section ``ident``'s schema: generated from ``CONTRACTS[ident]``, else ``SUMMARY_SCHEMAS[ident]``,
    of the report module the registry names for it (None where there is neither). The modules are
    imported on first use, not at the top of this one, because they import the helpers above."""
    from cs336_systems.report.contract import json_schema

    d = deliverables.BY_ID.get(ident)
    if d is None:
        return None
    report = importlib.import_module(d.report)
    contract = getattr(report, "CONTRACTS", {}).get(ident)
    return json_schema(contract) if contract is not None else getattr(report, "SUMMARY_SCHEMAS", {}).get(ident)


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
