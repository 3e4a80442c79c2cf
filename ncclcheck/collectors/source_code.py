"""The user's source at a frame's line, read with Python's ``ast``: what the statement is, which ``with`` blocks it
stands in, what it calls, the loop around it, and which functions of the file fill or signal what it waits on.

Files are read from this node (the ranks' own paths) and parsed once per version (path, size, mtime), each line's
facts made once per version; a file that cannot be read or parsed gives no facts, and the stack alone speaks.
"""

from __future__ import annotations

import ast
import io
import os
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field

from ncclcheck.model.waits import CodeAt

WAITS = frozenset({"get", "wait", "wait_for", "acquire", "join", "recv", "recv_bytes", "poll", "result"})
FILLS = {
    "get": ("put", "put_nowait", "send", "close"),
    "wait": ("set", "notify", "notify_all", "release", "put", "send"),
    "wait_for": ("notify", "notify_all"),
    "acquire": ("release",),
    "recv": ("send", "send_bytes", "close"),
    "recv_bytes": ("send", "send_bytes", "close"),
    "poll": ("send", "send_bytes", "put"),
    "join": (),
    "result": ("set_result", "set_exception"),
}
MAX_FILE = 4 << 20  # a source file bigger than this is not parsed
MAX_CALLS = 16


@dataclass(frozen=True)
class _Parsed:
    tree: ast.Module
    lines: tuple[str, ...]
    parents: dict[int, ast.AST]  # id(node) -> its parent
    facts: dict[int, CodeAt | None] = field(default_factory=dict)  # each line's facts, once asked (a stuck rank's
    # line is asked at every sample: walking the whole tree again for it cost an agent most of its own CPU)


_cache: dict[str, tuple[tuple[int, float], _Parsed | None]] = {}


def code_at(file: str, line: int) -> CodeAt | None:
    """The facts of the statement at ``file:line``; None when the file cannot be read or parsed here."""
    parsed = _parse(file)
    if parsed is None or not 0 < line <= len(parsed.lines):
        return None
    if line not in parsed.facts:
        parsed.facts[line] = _facts(parsed, file, line)
    return parsed.facts[line]


def _facts(parsed: _Parsed, file: str, line: int) -> CodeAt | None:
    node = _statement(parsed.tree, line)
    if node is None:
        return CodeAt(file, line, parsed.lines[line - 1].strip())
    chain = list(_ancestors(parsed, node))
    function = _function_name(chain)
    header = _header_of(node, line)
    text = _code(parsed.lines[node.lineno - 1] if header or node.lineno == line else parsed.lines[line - 1])
    calls = tuple(dict.fromkeys(_calls(header if header else [node])))[:MAX_CALLS]
    enters = _entered(node) if header and _is_with(node) else ()
    scope = next((a for a in chain if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))), parsed.tree)
    holds = tuple(
        ast.unparse(item.context_expr)
        for a in chain
        if _is_with(a) and _in_body(a, node)
        for item in a.items  # type: ignore[attr-defined]
        if _within(scope, a)
    )
    loop = next((a for a in chain if isinstance(a, (ast.While, ast.For, ast.AsyncFor))), None)
    waited = [*_waited(calls), *enters]
    fillers = tuple((obj, _fillers(parsed, obj, _methods(calls, obj))) for obj in dict.fromkeys(waited))
    return CodeAt(
        file,
        line,
        text[:200],
        function,
        holds,
        enters,
        calls,
        _code(parsed.lines[loop.lineno - 1])[:200] if loop is not None else None,
        tuple((obj, names) for obj, names in fillers if names),
        _filled(scope),
    )


def _code(line: str) -> str:
    """A line of source without its comment and surrounding space (a ``#`` inside a string stays)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return line.strip()
    comment = next((t for t in tokens if t.type == tokenize.COMMENT), None)
    return (line[: comment.start[1]] if comment is not None else line).strip()


def _parse(file: str) -> _Parsed | None:
    try:
        st = os.stat(file)
    except OSError:
        return None
    key = (st.st_size, st.st_mtime)
    held = _cache.get(file)
    if held is not None and held[0] == key:
        return held[1]
    parsed: _Parsed | None = None
    if st.st_size <= MAX_FILE:
        try:
            with open(file, encoding="utf-8", errors="replace") as handle:
                source = handle.read()
            tree = ast.parse(source, file)
            parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
            parsed = _Parsed(tree, tuple(source.splitlines()), parents)
        except (OSError, SyntaxError, ValueError, RecursionError):
            parsed = None
    _cache[file] = (key, parsed)
    return parsed


def _statement(tree: ast.Module, line: int) -> ast.stmt | None:
    """The innermost statement whose lines hold ``line``."""
    found: ast.stmt | None = None
    for node in ast.walk(tree):
        inside = isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno)
        if inside and isinstance(node, ast.stmt) and (found is None or _inside(node, found)):
            found = node
    return found


def _inside(node: ast.stmt, outer: ast.stmt) -> bool:
    return (node.lineno, -(node.end_lineno or 0)) >= (outer.lineno, -(outer.end_lineno or 0))


def _ancestors(parsed: _Parsed, node: ast.AST) -> Iterator[ast.AST]:
    current = parsed.parents.get(id(node))
    while current is not None:
        yield current
        current = parsed.parents.get(id(current))


def _function_name(chain: list[ast.AST]) -> str:
    """The function's qualified name as Python 3.11 (and py-spy) spell it: ``Shards.__getitem__``,
    ``main.<locals>.flush``."""
    names: list[str] = []
    for node in reversed(chain):
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names += [node.name, "<locals>"]
    while names and names[-1] == "<locals>":
        names.pop()
    return ".".join(names)


def _header_of(node: ast.stmt, line: int) -> list[ast.AST] | None:
    """The expressions of a compound statement's header when ``line`` is on it (a ``with``'s items, a loop's
    iterable or test, an ``if``'s test); None when the line is not a header line."""
    body = getattr(node, "body", None)
    if not body or not isinstance(body, list) or line >= body[0].lineno:
        return None
    if _is_with(node):
        return [item.context_expr for item in node.items]  # type: ignore[attr-defined]
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [node.iter]
    if isinstance(node, (ast.While, ast.If)):
        return [node.test]
    return None


def _entered(node: ast.stmt) -> tuple[str, ...]:
    """The objects a ``with`` line enters that can be locks or conditions: names and attributes (``stats_lock``,
    ``self._cond``), not calls (``open(path)``, ``torch.no_grad()``)."""
    items = getattr(node, "items", [])
    return tuple(ast.unparse(i.context_expr) for i in items if isinstance(i.context_expr, (ast.Name, ast.Attribute)))


def _is_with(node: ast.AST) -> bool:
    return isinstance(node, (ast.With, ast.AsyncWith))


def _in_body(outer: ast.AST, node: ast.AST) -> bool:
    body = getattr(outer, "body", [])
    return bool(body) and body[0].lineno <= getattr(node, "lineno", 0) <= (body[-1].end_lineno or 0)


def _within(scope: ast.AST, node: ast.AST) -> bool:
    """Whether ``node`` is inside ``scope``'s lines (a ``with`` of the same function, not of an enclosing one)."""
    if isinstance(scope, ast.Module):
        return True
    first, last = int(getattr(scope, "lineno", 0)), int(getattr(scope, "end_lineno", 0) or 0)
    return first <= int(getattr(node, "lineno", 0)) <= last


def _calls(nodes: list[ast.AST]) -> Iterator[str]:
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.Call):
                name = _dotted(node.func)
                if name:
                    yield name


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _waited(calls: tuple[str, ...]) -> Iterator[str]:
    """``batches`` of ``batches.get``: the objects a statement calls a waiting method of."""
    for call in calls:
        obj, _, method = call.rpartition(".")
        if obj and method in WAITS:
            yield obj


def _methods(calls: tuple[str, ...], obj: str) -> tuple[str, ...]:
    """The filling methods for what the statement does with ``obj`` (a ``with obj:`` is an acquire)."""
    out: list[str] = []
    for call in calls:
        head, _, method = call.rpartition(".")
        if head == obj:
            out += FILLS.get(method, ())
    return tuple(dict.fromkeys(out or ("release",)))


def _fillers(parsed: _Parsed, obj: str, methods: tuple[str, ...]) -> tuple[str, ...]:
    """The functions of the file that call ``obj.<method>`` for one of ``methods`` (or, for a lock, enter it in a
    ``with``): who could free a thread waiting on ``obj``."""
    out: list[str] = []
    for node in ast.walk(parsed.tree):
        hit = False
        if isinstance(node, ast.Call) and _dotted(node.func) in {f"{obj}.{m}" for m in methods}:
            hit = True
        elif "release" in methods and _is_with(node):
            hit = any(ast.unparse(item.context_expr) == obj for item in node.items)  # type: ignore[attr-defined]
        if hit:
            name = _function_name([node, *_ancestors(parsed, node)][1:])
            out.append(name or "<module>")
    return tuple(dict.fromkeys(out))


def _filled(scope: ast.AST) -> tuple[str, ...]:
    """The objects a function fills or signals anywhere in its body (``batches`` for ``batches.put(x)``)."""
    methods = {m for names in FILLS.values() for m in names}
    out = []
    for node in ast.walk(scope) if not isinstance(scope, ast.Module) else ():
        if isinstance(node, ast.Call):
            name = _dotted(node.func) or ""
            obj, _, method = name.rpartition(".")
            if obj and method in methods:
                out.append(obj)
    return tuple(dict.fromkeys(out))[:MAX_CALLS]
