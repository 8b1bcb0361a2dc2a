"""A safe evaluator of the small integer expressions a config uses for launch geometry.

An expression such as "cdiv(cols, 32)" or "cdiv(m, 64) * 2" is parsed with `ast` and walked by
hand: only int literals, names from a given mapping, + - * // %, unary minus, parentheses and the
functions cdiv, min and max are accepted. Nothing is ever passed to eval or exec. Anything else
raises ValueError with a one-sentence reason.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping

MAX_LENGTH = 200
"""Longest expression text accepted."""

MAX_MAGNITUDE = 2**63
"""Largest absolute value any literal or intermediate result may reach."""

FUNCTIONS = ("cdiv", "min", "max")
"""Functions an expression may call."""

_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_UNARY = (ast.USub, ast.UAdd)


def _fail(text: str, reason: str) -> ValueError:
    return ValueError(f"Expression {text!r} {reason}.")


def parse(text: str) -> ast.expr:
    """The checked syntax tree of an expression; ValueError if it uses anything not allowed."""
    if not isinstance(text, str):
        raise ValueError(f"Expression {text!r} is a {type(text).__name__}, not a string.")
    return _parse(text)


@functools.lru_cache(maxsize=512)
def _parse(text: str) -> ast.expr:
    if len(text) > MAX_LENGTH:
        raise ValueError(f"Expression of {len(text)} characters is longer than the "
                         f"{MAX_LENGTH} allowed.")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise _fail(text, "is not valid syntax") from None
    _check(tree.body, text)
    return tree.body


def _check(node: ast.AST, text: str) -> None:
    """Raise ValueError unless every node of the tree is allowed."""
    if isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise _fail(text, f"contains the literal {node.value!r}, but only integers are allowed")
        if abs(node.value) > MAX_MAGNITUDE:
            raise _fail(text, "contains an integer literal that is too large")
    elif isinstance(node, ast.Name):
        if not isinstance(node.ctx, ast.Load):
            raise _fail(text, "assigns to a name")
    elif isinstance(node, ast.BinOp):
        if not isinstance(node.op, _BINOPS):
            raise _fail(text, f"uses the operator {type(node.op).__name__}, but only + - * // % "
                              f"are allowed")
        _check(node.left, text)
        _check(node.right, text)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, _UNARY):
            raise _fail(text, f"uses the operator {type(node.op).__name__}, but only unary - and "
                              f"+ are allowed")
        _check(node.operand, text)
    elif isinstance(node, ast.Call):
        _check_call(node, text)
    else:
        raise _fail(text, f"uses {type(node).__name__} syntax, which is not allowed (only integers, "
                          f"names, + - * // %, parentheses and {', '.join(FUNCTIONS)})")


def _check_call(node: ast.Call, text: str) -> None:
    if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
        raise _fail(text, f"calls something other than {', '.join(FUNCTIONS)}")
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        raise _fail(text, f"passes keyword or starred arguments to {node.func.id}")
    name, count = node.func.id, len(node.args)
    if (name == "cdiv" and count != 2) or (name != "cdiv" and count < 2):
        wanted = "exactly 2" if name == "cdiv" else "at least 2"
        raise _fail(text, f"calls {name} with {count} arguments, but it takes {wanted}")
    for arg in node.args:
        _check(arg, text)


def names(text: str) -> set[str]:
    """The variable names an expression reads (function names excluded)."""
    tree = parse(text)
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in calls}


def check(text: str, allowed: Iterable[str]) -> None:
    """ValueError unless the expression is allowed and reads only names in `allowed`."""
    allowed = set(allowed)
    unknown = sorted(names(text) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise _fail(text, f"uses the unknown name {unknown[0]!r} (known: {known})")


def evaluate(text: str | int, values: Mapping[str, int]) -> int:
    """The integer value of an expression (or of a plain int) with names bound from `values`."""
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise ValueError(f"Expression {text!r} is a {type(text).__name__}, not an integer or a "
                         f"string.")
    if isinstance(text, int):
        return text
    return _eval(parse(text), values, text)


def _bounded(value: int, text: str) -> int:
    if abs(value) > MAX_MAGNITUDE:
        raise _fail(text, "evaluates to a value that is too large")
    return value


def _eval(node: ast.expr, values: Mapping[str, int], text: str) -> int:
    if isinstance(node, ast.Constant):
        assert type(node.value) is int  # parse() admits no other literal
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise _fail(text, f"uses the unknown name {node.id!r}")
        value = values[node.id]
        if type(value) is not int:
            raise _fail(text, f"binds {node.id!r} to {value!r}, which is not an integer")
        return _bounded(value, text)
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, values, text)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        return _bounded(_binop(node.op, _eval(node.left, values, text),
                               _eval(node.right, values, text), text), text)
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    args = [_eval(a, values, text) for a in node.args]
    if node.func.id == "cdiv":
        if args[1] <= 0:
            raise _fail(text, f"divides by {args[1]} in cdiv, but the divisor must be positive")
        return -(-args[0] // args[1])
    return min(args) if node.func.id == "min" else max(args)


def _binop(op: ast.operator, left: int, right: int, text: str) -> int:
    if isinstance(op, ast.Add):
        return left + right
    if isinstance(op, ast.Sub):
        return left - right
    if isinstance(op, ast.Mult):
        return left * right
    if right == 0:
        raise _fail(text, "divides by zero")
    return left // right if isinstance(op, ast.FloorDiv) else left % right
