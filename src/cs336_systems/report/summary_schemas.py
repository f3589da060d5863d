"""JSON Schema (draft 2020-12) written by hand: the helpers ``report.contract`` builds its generated
schemas with, and the summaries of the sections not converted to contracts yet declare theirs with
(``Declared`` blocks: the provenance line, what_ran's table): every key the template reads is declared, as deep
as the template reads it; a key is required unless the template tests for it first (``is defined``,
``in``, ``.get``) or a report leaves it out of some summaries. ``report.contract`` finds a section's
schema, whichever way it is declared, and checks a summary against it.

The helpers: ``obj(...)`` an object with those keys (required, unless wrapped in ``opt``),
``mapping(T)`` an object of any keys whose values are T, ``arr(T)`` a list, ``null(T)`` T or null.
A block that several sections share is written once, in the report module that writes it, and
imported by the others.
"""
from __future__ import annotations

import copy

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
