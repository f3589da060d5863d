"""What a section template reads of its summary, and what it decides itself, from jinja2's AST.

``reads(ident)`` follows the summary (``d`` in a section template) through ``set`` aliases, ``for``
loops, filters and the macros of ``sections/_*.md.j2`` it calls, and gives every path it reads:
a tuple of keys, with ``*`` for any item of a list or any value of a mapping. ``guarded`` paths are
those the template tests before reading (``is defined``, ``in``, ``.get``): the summary may lack them;
``nullable`` those it tests with ``is none`` or for truth (``{% if x %}``, ``x or …``): null is one
of the values it words.

``logic(ident)`` lists the comparisons and arithmetic in a template's tags, ``figures(ident)`` the
numbers typed into its prose, ``branches(ident)`` its ``{% if %}`` and ``{% elif %}`` tags (the rules are in
``tests/writeup/test_template_lint.py``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
from jinja2 import nodes

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"
SECTIONS_DIR = TEMPLATES / "sections"
ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), trim_blocks=True, lstrip_blocks=True,
                         keep_trailing_newline=True)
ANY = "*"


def parse(name: str) -> nodes.Template:
    source = (SECTIONS_DIR / name).read_text()
    return ENV.parse(source, name=name)


@dataclass(frozen=True)
class Ref:
    """A value read from the summary: its path, and whether it is a collection whose items are the
    path itself (what ``map(attribute=…)`` gives: the items of ``xs | map(attribute="a")`` are ``xs.*.a``)."""
    path: tuple
    mapped: bool = False

    def item(self) -> "Ref":
        return Ref(self.path) if self.mapped else Ref(self.path + (ANY,))

    def key(self, name) -> "Ref":
        return Ref((self.path + (ANY,) if self.mapped else self.path) + (name,))


# Filters that give back the collection they filter, the item they pick, or an item's attribute.
_SAME = {"sort", "list", "selectattr", "rejectattr", "select", "reject", "unique", "reverse", "default", "batch"}
_ITEM = {"first", "last", "max", "min", "random"}
_PAIRS = {"dictsort"}
_ATTR_ARG = {"selectattr", "rejectattr", "groupby"}   # the attribute is the first argument


@dataclass
class Reads:
    paths: set = field(default_factory=set)
    guarded: set = field(default_factory=set)
    nullable: set = field(default_factory=set)     # tested with `is none` or for truth


class _Walker:
    def __init__(self, macros: dict):
        self.macros = macros          # name -> nodes.Macro, this template's and those it imports
        self.blocks: dict = {}        # name -> nodes.Block, the section's own (it extends _section)
        self.out = Reads()
        self.depth = 0

    # --- expressions -----------------------------------------------------------------------
    def read(self, ref: Ref | None) -> Ref | None:
        if ref is not None and ref.path:
            self.out.paths.add(ref.path)
        return ref

    @staticmethod
    def _parts(dotted: str) -> list | None:
        """The keys of an attribute string; over ``items()``' pairs "0" is the key (None: not the summary's)
        and "1" the value, which is the item itself."""
        parts = dotted.split(".")
        if parts[0] == "0":
            return None
        return parts[1:] if parts[0] == "1" else parts

    def attr(self, ref: Ref | None, dotted: str) -> None:
        parts = self._parts(dotted)
        if ref is None or parts is None:
            return
        r = ref.item()
        for part in parts:
            r = self.read(Ref(r.path + (part,)))

    def expr(self, node, env: dict):
        """The Ref a summary expression evaluates to (None where it is not the summary's), recording reads."""
        if node is None:
            return None
        if isinstance(node, nodes.Name):
            return env.get(node.name)
        if isinstance(node, nodes.Const):
            return None
        if isinstance(node, nodes.Getattr):
            base = self.expr(node.node, env)
            return self.read(base.key(node.attr)) if base is not None else None
        if isinstance(node, nodes.Getitem):
            base = self.expr(node.node, env)
            arg = node.arg
            if isinstance(arg, nodes.Slice):
                for part in (arg.start, arg.stop, arg.step):
                    self.expr(part, env)
                return base
            self.expr(arg, env)
            if base is None:
                return None
            if isinstance(arg, nodes.Const) and isinstance(arg.value, str):
                return self.read(base.key(arg.value))
            return self.read(base.item())
        if isinstance(node, nodes.Filter):
            return self.filter(node, env)
        if isinstance(node, nodes.Test):
            base = self.expr(node.node, env)
            for a in node.args:
                self.expr(a, env)
            if node.name in ("defined", "undefined") and base is not None:
                self.out.guarded.add(base.path)
            if node.name == "none" and base is not None:
                self.out.nullable.add(base.path)
            return None
        if isinstance(node, nodes.Call):
            return self.call(node, env)
        if isinstance(node, nodes.Compare):
            left = self.expr(node.expr, env)
            for op in node.ops:
                right = self.expr(op.expr, env)
                if op.op in ("in", "notin") and right is not None and isinstance(node.expr, nodes.Const) \
                        and isinstance(node.expr.value, str):
                    self.out.guarded.add(right.key(node.expr.value).path)
            del left
            return None
        if isinstance(node, nodes.CondExpr):
            self.test(node.test, env)
            a = self.expr(node.expr1, env)
            b = self.expr(node.expr2, env)
            return a if a is not None else b
        if isinstance(node, (nodes.And, nodes.Or)):
            a = self.test(node.left, env)
            b = self.test(node.right, env) if isinstance(node, nodes.And) else self.expr(node.right, env)
            return a if a is not None else b
        if isinstance(node, nodes.Not):
            return self.test(node.node, env)
        for child in node.iter_child_nodes():
            self.expr(child, env)
        return None

    def test(self, node, env: dict):
        """A value the template tests for truth: it may be empty, false or null there."""
        ref = self.expr(node, env)
        if ref is not None and ref.path and not ref.mapped:
            self.out.nullable.add(ref.path)
        return ref

    def filter(self, node: nodes.Filter, env: dict):
        base = self.expr(node.node, env)
        for a in node.args:
            self.expr(a, env)
        kwargs = {k.key: k.value for k in node.kwargs}
        for v in kwargs.values():
            self.expr(v, env)
        attribute = kwargs.get("attribute")
        if isinstance(attribute, nodes.Const) and isinstance(attribute.value, str):
            self.attr(base, attribute.value)
        if node.name in _ATTR_ARG and node.args and isinstance(node.args[0], nodes.Const) \
                and isinstance(node.args[0].value, str):
            self.attr(base, node.args[0].value)
        if base is None:
            return None
        if node.name == "map" and isinstance(attribute, nodes.Const) and isinstance(attribute.value, str):
            parts = self._parts(attribute.value)
            return None if parts is None else Ref(base.item().path + tuple(parts), mapped=True)
        if node.name in _SAME or node.name in _PAIRS:
            return base
        if node.name in _ITEM:
            return base.item()
        return None

    def call(self, node: nodes.Call, env: dict):
        args = [self.expr(a, env) for a in node.args]
        kwargs = {k.key: self.expr(k.value, env) for k in node.kwargs}
        target = node.node
        if (isinstance(target, nodes.Getattr) and isinstance(target.node, nodes.Name) and target.node.name == "self"
                and target.attr in self.blocks):
            self.body(self.blocks[target.attr].body, env)      # {{ self.headline() }}: the block, read in place
            return None
        if isinstance(target, nodes.Getattr):
            base = self.expr(target.node, env)
            if base is None:
                return None
            if target.attr in ("items", "values", "keys"):
                return base
            if target.attr == "get" and node.args and isinstance(node.args[0], nodes.Const):
                ref = self.read(base.key(node.args[0].value))
                self.out.guarded.add(ref.path)
                return ref
            return None       # a method of a value (str.replace, list.append…), not a key
        if isinstance(target, nodes.Name) and target.name in self.macros and self.depth < 8:
            macro = self.macros[target.name]
            inner = {n: v for n, v in env.items() if n == "d"}   # a macro sees the context, not the caller's sets
            names = [a.name for a in macro.args]
            defaults = dict(zip(names[len(names) - len(macro.defaults):], macro.defaults))
            for i, name in enumerate(names):
                if i < len(args):
                    inner[name] = args[i]
                elif name in kwargs:
                    inner[name] = kwargs[name]
                elif name in defaults:
                    inner[name] = self.expr(defaults[name], inner)
            self.depth += 1
            self.body(macro.body, inner)
            self.depth -= 1
            return None
        self.expr(target, env)
        return None

    # --- statements --------------------------------------------------------------------------
    def body(self, stmts, env: dict) -> None:
        for stmt in stmts:
            self.stmt(stmt, env)

    def stmt(self, node, env: dict) -> None:
        if isinstance(node, nodes.Output):
            for n in node.nodes:
                if not isinstance(n, nodes.TemplateData):
                    self.expr(n, env)
        elif isinstance(node, nodes.Assign):
            if isinstance(node.target, nodes.Tuple) and isinstance(node.node, nodes.Tuple) and (
                    len(node.target.items) == len(node.node.items)):
                # {% set a, b = x, y %}: each name is what its own expression reads
                for target, value in zip(node.target.items, node.node.items):
                    env[target.name] = self.expr(value, env)
                return
            value = self.expr(node.node, env)
            if isinstance(node.target, nodes.Name):
                env[node.target.name] = value
        elif isinstance(node, nodes.If):
            self.test(node.test, env)
            self.body(node.body, env)
            for elif_ in node.elif_:
                self.stmt(elif_, env)
            self.body(node.else_, env)
        elif isinstance(node, nodes.For):
            it = self.expr(node.iter, env)
            inner = dict(env)
            item = it.item() if it is not None else None
            pairs = isinstance(node.iter, nodes.Filter) and node.iter.name in _PAIRS or (
                isinstance(node.iter, nodes.Call) and isinstance(node.iter.node, nodes.Getattr)
                and node.iter.node.attr == "items")
            if isinstance(node.target, nodes.Name):
                inner[node.target.name] = None if pairs else item
            elif isinstance(node.target, nodes.Tuple):
                names = [t.name for t in node.target.items]
                for name in names:
                    inner[name] = None
                if pairs and len(names) == 2:
                    inner[names[1]] = item
            self.expr(node.test, inner)
            self.body(node.body, inner)
            self.body(node.else_, dict(env))
        elif isinstance(node, nodes.Macro):
            self.macros[node.name] = node
        elif isinstance(node, (nodes.FromImport, nodes.Import, nodes.Extends)):
            pass
        elif isinstance(node, nodes.Block):
            # the base's block renders the section's own where it has one
            self.body(self.blocks.get(node.name, node).body, env)
        elif isinstance(node, nodes.ExprStmt):
            self.expr(node.node, env)
        elif isinstance(node, nodes.AssignBlock):
            self.body(node.body, env)
        else:
            for child in node.iter_child_nodes():
                if isinstance(child, nodes.Stmt):
                    self.stmt(child, env)
                elif isinstance(child, nodes.Expr):
                    self.expr(child, env)


def imported_macros(tree: nodes.Template) -> dict:
    """The macros a section imports, by the names it gives them, and the other macros of the files
    it imports them from, by their own names: an imported macro may call its file's others (the
    section's own macros, added after these, win a clash)."""
    siblings, out = {}, {}
    for imp in tree.find_all(nodes.FromImport):
        other = ENV.parse((TEMPLATES / imp.template.value).read_text())
        defined = {m.name: m for m in other.find_all(nodes.Macro)}
        siblings.update(defined)
        for name in imp.names:
            name, alias = (name, name) if isinstance(name, str) else name
            out[alias] = defined[name]
    return {**siblings, **out}


def reads(ident: str) -> Reads:
    """Every summary path section ``ident``'s template reads (the summary is ``d``)."""
    tree = parse(f"{ident}.md.j2")
    macros = imported_macros(tree)
    macros.update({m.name: m for m in tree.find_all(nodes.Macro)})
    walker = _Walker(macros)
    env = {"d": Ref(())}
    extends = next(tree.find_all(nodes.Extends), None)
    if extends is None:
        walker.body(tree.body, env)
        return walker.out
    # A section that extends the base: its top-level sets first, then the base's body, whose blocks
    # are the section's (Jinja runs a child's top level before its parent renders).
    walker.blocks = {b.name: b for b in tree.find_all(nodes.Block)}
    walker.body([n for n in tree.body if not isinstance(n, nodes.Block)], env)
    base = ENV.parse((TEMPLATES / extends.template.value).read_text())
    walker.macros.update(imported_macros(base))
    walker.body(base.body, env)
    return walker.out


# --- lint ---------------------------------------------------------------------------------------

_ORDER = {"gt": ">", "gteq": ">=", "lt": "<", "lteq": "<="}
_ARITH = {nodes.Add: "+", nodes.Sub: "-", nodes.Mul: "*", nodes.Div: "/", nodes.FloorDiv: "//", nodes.Mod: "%",
          nodes.Pow: "**"}
_NUMERIC_FILTERS = {"max", "min", "sum", "round", "abs"}
_SELECT = {"selectattr", "rejectattr"}
_ORDER_TESTS = {"gt", "ge", "lt", "le", "greaterthan", "lessthan", ">", ">=", "<", "<="}


def _literal(node) -> bool:
    return isinstance(node, nodes.Const) or (
        isinstance(node, (nodes.List, nodes.Tuple)) and all(_literal(i) for i in node.items))


def logic(name: str) -> list[tuple[int, str]]:
    """(line, what) for each comparison or piece of arithmetic in a template's tags."""
    tree = parse(name)
    found = []
    for node in tree.find_all((nodes.Compare, nodes.BinExpr, nodes.Neg, nodes.Filter)):
        if isinstance(node, nodes.Compare):
            operands = [node.expr] + [op.expr for op in node.ops]
            for op, (left, right) in zip(node.ops, zip(operands, operands[1:])):
                if op.op in _ORDER:
                    found.append((node.lineno, f"comparison {_ORDER[op.op]}"))
                elif op.op in ("eq", "ne") and not (_literal(left) or _literal(right)):
                    found.append((node.lineno, f"comparison {'==' if op.op == 'eq' else '!='} of two values"))
        elif isinstance(node, nodes.BinExpr) and type(node) in _ARITH:
            if isinstance(node, nodes.Mod) and isinstance(node.left, nodes.Const) and isinstance(node.left.value, str):
                continue          # "%g" % x: printf formatting, not arithmetic
            if _literal(node.left) and _literal(node.right):
                continue
            found.append((node.lineno, f"arithmetic {_ARITH[type(node)]}"))
        elif isinstance(node, nodes.Neg) and not _literal(node.node):
            found.append((node.lineno, "arithmetic unary -"))
        elif isinstance(node, nodes.Filter) and node.name in _NUMERIC_FILTERS:
            found.append((node.lineno, f"arithmetic | {node.name}"))
        elif isinstance(node, nodes.Filter) and node.name in _SELECT and _ordering_test(node.args[1:2]):
            found.append((node.lineno, f"comparison | {node.name}({node.args[1].value!r})"))
    for node in tree.find_all(nodes.Test):
        if node.name in _ORDER_TESTS:
            found.append((node.lineno, f"comparison is {node.name}"))
    return sorted(found)


def _ordering_test(args) -> bool:
    return bool(args) and isinstance(args[0], nodes.Const) and args[0].value in _ORDER_TESTS


# A number typed into prose is any run of characters holding a digit, less these (each is a name, not a figure):
_ALLOWED_TOKENS = [
    r"[A-Za-z][A-Za-z0-9_\-]*",   # a name that starts with a letter: A1, C12, fp32, H100s, L2, fc2, ZeRO-1
    r"2\.7B",                      # the largest model size's name
]
_ALLOWED = re.compile(r"(?:%s)(?:'s)?" % "|".join(f"(?:{p})" for p in _ALLOWED_TOKENS))
_WORD = re.compile(r"[^\s|]*\d[^\s|]*")
_EDGE = ".,;:!?()[]{}*\"'“”‘’—–-"
_CODE = re.compile(r"`[^`]*`")
PLACEHOLDER = "\x00"


def prose(name: str) -> list[tuple[int, str]]:
    """(line, text) of a template's prose: its data tokens, each tag or placeholder replaced by PLACEHOLDER,
    a comment by nothing, as one text per line."""
    source = (SECTIONS_DIR / name).read_text()
    lines: dict[int, list[str]] = {}
    for lineno, kind, value in ENV.lex(source):
        if kind == "data":
            for i, part in enumerate(value.split("\n")):
                lines.setdefault(lineno + i, []).append(part)
        elif kind in ("variable_begin", "block_begin"):
            lines.setdefault(lineno, []).append(PLACEHOLDER)
    return [(n, "".join(parts)) for n, parts in sorted(lines.items())]


def figures(name: str) -> list[tuple[int, str]]:
    """(line, token) for each number typed into a template's prose, outside code spans and allowed names."""
    numbered = prose(name)
    text = "\n".join(line for _, line in numbered)
    # A code span (which may run over a line break, as in CommonMark) is code, not prose.
    text = _CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)
    found = []
    for (lineno, _), line in zip(numbered, text.split("\n")):
        for m in _WORD.finditer(line):
            token = m.group().strip(_EDGE)
            pieces = [p for p in re.split(r"[/,()·\x00]", token) if any(c.isdigit() for c in p)]
            if pieces and all(_ALLOWED.fullmatch(p.strip(_EDGE)) for p in pieces):
                continue
            found.append((lineno, token))
    return found


def branches(name: str) -> list[tuple[int, str]]:
    """(line, "if") for each ``{% if %}`` or ``{% elif %}`` tag of a template: a choice of words the
    template makes from the data (a conditional expression, ``'s' if n != 1``, is not counted)."""
    return [(node.lineno, "if") for node in parse(name).find_all(nodes.If)]
