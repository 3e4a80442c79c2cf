"""Finding ids are constants of one catalogue per command (ncclcheck/model/ids), and the wire keeps their strings.

An id is in every ``--json``, so a comparison to a misspelt id never fires and says nothing. These tests read the
package's source: no builder spells an id (it names a constant of its command's catalogue), and every id the code
compares (``f.id == X``, ``f.id in X``, ``f.id.startswith(X)``) is one that a rule of ``logs``' tables or a builder
can produce. The checkers are tried on small sources first, so a test that passes is one that could fail.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from conftest import REPO

from ncclcheck.analysis.env import NEEDS
from ncclcheck.analysis.logs.diagnose import IGNORED
from ncclcheck.analysis.logs.line_facts import EXCEPTION, FR_SITE, UNRECOGNISED
from ncclcheck.analysis.logs.rules import RULES, TRAIL_RULES
from ncclcheck.model.ids import env as env_ids
from ncclcheck.model.ids import flight as flight_ids
from ncclcheck.model.ids import logs as logs_ids
from ncclcheck.model.ids import run as run_ids
from ncclcheck.model.ids import smoke as smoke_ids
from ncclcheck.model.ids import watch as watch_ids

PACKAGE = REPO / "ncclcheck"
CATALOGUES: dict[str, ModuleType] = {
    "env": env_ids,
    "flight": flight_ids,
    "logs": logs_ids,
    "run": run_ids,
    "smoke": smoke_ids,
    "watch": watch_ids,
}
NOT_IDS = {"flight": {"PREFIX"}}  # a catalogue's constant that is no id
BUILDERS = frozenset({"Finding", "Check", "conclude", "skip"})  # calls whose first argument is an id
# The modules whose findings are built in code, and the catalogue their ids must come from; ``logs`` builds some of
# its findings in code too (cross-rank checks, crashes, stack dumps).
OWNER = (
    ("analysis/env/", "env"),
    ("analysis/flight/", "flight"),
    ("analysis/logs/", "logs"),
    ("analysis/run/", "run"),
    ("analysis/smoke/", "smoke"),
    ("commands/smoke/", "smoke"),
    ("analysis/watch/", "watch"),
    ("analysis/ras.py", "watch"),
    ("analysis/gpu.py", "watch"),
)
# ``logs``' rule tables keep their rows' literals (data/messages.tsv describes them row by row)
TABLES = re.compile(r"analysis/logs/(?:\w+_)?rules\.py$|analysis/logs/ib_verbs\.py$")
# a literal that spells an id but means something else there
OTHER_MEANING = {("analysis/logs/crashes.py", "thread-died"): "a kind of line the crash fold reads"}


def ids_of(catalogue: str) -> dict[str, str]:
    module = CATALOGUES[catalogue]
    skip = NOT_IDS.get(catalogue, set())
    return {k: v for k, v in vars(module).items() if k.isupper() and isinstance(v, str) and k not in skip}


ALL_IDS = {v for c in CATALOGUES for v in ids_of(c).values()}
RULE_IDS = {r.id for r in (*RULES, *TRAIL_RULES, EXCEPTION, UNRECOGNISED, FR_SITE, IGNORED)}


@functools.cache
def _modules() -> tuple[tuple[str, ast.Module], ...]:
    """The package's modules, parsed once per process (the checkers only read the trees)."""
    return tuple(
        (rel, ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(PACKAGE.rglob("*.py"))
        if not (rel := path.relative_to(PACKAGE).as_posix()).startswith("model/ids/")
    )


def _name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _catalogue_ref(node: ast.AST) -> tuple[str, str] | None:
    """``watch_ids.SLOW_RANK`` -> ("watch", "SLOW_RANK")."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id.endswith("_ids"):
        return node.value.id.removesuffix("_ids"), node.attr
    return None


def spelt_ids(tree: ast.Module, known: set[str]) -> list[tuple[int, str]]:
    """Builders given an id as a literal, and literals with a '-' or '.' that spell a known id anywhere."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node) in BUILDERS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                out.append((node.lineno, first.value))
        elif isinstance(node, ast.Constant) and node.value in known and re.search(r"[-.]", str(node.value)):
            out.append((node.lineno, str(node.value)))
    return sorted(set(out))


def built_from(tree: ast.Module) -> list[tuple[int, str, str]]:
    """Every builder's first argument that names a catalogue constant: (line, catalogue, name)."""
    return [
        (node.lineno, *ref)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _name(node) in BUILDERS and node.args
        if (ref := _catalogue_ref(node.args[0])) is not None
    ]


def _strings(value: object) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, (set, frozenset, tuple, list)):
        return {v for v in value if isinstance(v, str)}
    return set()


def _value(node: ast.expr, namespace: dict[str, Any]) -> set[str]:
    """What an operand holds, where it can be told without running the function: a literal, a module constant, a
    catalogue constant, a rule's id, or a display of them; a local name gives nothing."""
    if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
        return {s for e in node.elts for s in _value(e, namespace)}
    if isinstance(node, ast.Call) and _name(node) in {"frozenset", "set"} and node.args:
        return _value(node.args[0], namespace)
    if not isinstance(node, (ast.Constant, ast.Name, ast.Attribute)):
        return set()
    try:
        return _strings(eval(compile(ast.Expression(node), "<operand>", "eval"), dict(namespace)))
    except Exception:  # a local name, self.something: not known before the code runs
        return set()


def _is_id(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "id"


def _names_a_catalogue(node: ast.expr) -> bool:
    return any(_catalogue_ref(n) is not None for n in ast.walk(node))


def _operands(tree: ast.Module) -> Iterator[tuple[int, ast.expr, str]]:
    """What each comparison of an id compares it to: (line, operand, "" or "*" for a prefix asked by startswith)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_id(o) for o in operands) or any(_names_a_catalogue(o) for o in operands):
                yield from ((node.lineno, o, "") for o in operands)  # f.id is local: it gives nothing
        elif isinstance(node, ast.Call) and _name(node) == "startswith" and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and _is_id(func.value):
                yield node.lineno, node.args[0], "*"


def compared_ids(tree: ast.Module, namespace: dict[str, Any]) -> list[tuple[int, str]]:
    """Every id compared to a finding's or rule's id, or to a catalogue constant: (line, id); a prefix asked of an
    id by startswith comes as "prefix*"."""
    return [(line, s + mark) for line, operand, mark in _operands(tree) for s in _value(operand, namespace)]


def _namespace(rel: str, tree: ast.Module) -> dict[str, Any] | None:
    """The module's globals, to read its constants; None where it compares no id (``__main__`` is not imported: it
    runs the cli)."""
    if rel.endswith("__main__.py") or next(_operands(tree), None) is None:
        return None
    name = "ncclcheck." + rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return vars(importlib.import_module(name))


def _compared_in_package() -> Iterator[tuple[str, list[tuple[int, str]]]]:
    for rel, tree in _modules():
        namespace = _namespace(rel, tree)
        if namespace is not None:
            yield rel, compared_ids(tree, namespace)


def _producible() -> set[str]:
    """The ids a rule or a builder can produce: the rules' own, every id of the catalogues whose findings are built
    in code, and the ``logs`` constants that a builder of the package names."""
    built = {name for _, tree in _modules() for _, cat, name in built_from(tree) if cat == "logs"}
    logs_built = {v for k, v in ids_of("logs").items() if k in built}
    coded = {v for c in CATALOGUES if c != "logs" for v in ids_of(c).values()}
    return RULE_IDS | coded | logs_built


def _unproduced(compared: list[tuple[int, str]], producible: set[str]) -> list[tuple[int, str]]:
    def known(s: str) -> bool:
        return any(p.startswith(s[:-1]) for p in producible) if s.endswith("*") else s in producible

    return [(line, s) for line, s in compared if not known(s)]


# --- the checkers fire where they must, and only there


def test_a_builder_given_a_literal_is_found() -> None:
    tree = ast.parse('Finding("slow-rank", "warning", m)\nconclude("ib.memlock", "", [])\nx = "slow-rank"\n')
    assert spelt_ids(tree, ALL_IDS) == [(1, "slow-rank"), (2, "ib.memlock"), (3, "slow-rank")]


def test_a_builder_given_a_constant_or_a_status_word_is_not_found() -> None:
    tree = ast.parse('Finding(watch_ids.SLOW_RANK, "warning", m)\nif v.status == "finished": pass\nx = "dead"\n')
    assert spelt_ids(tree, ALL_IDS) == []
    assert built_from(tree) == [(1, "watch", "SLOW_RANK")]


def test_a_misspelt_compared_id_is_found() -> None:
    source = (
        'TYPO = frozenset({"slow-rnak"})\n'
        'a = [f for f in fs if f.id == "collective-timeot"]\n'
        "b = [f for f in fs if f.id in TYPO]\n"
        'c = [f for f in fs if f.id.startswith("frr-")]\n'
    )
    namespace = {"TYPO": frozenset({"slow-rnak"})}
    compared = compared_ids(ast.parse(source), namespace)
    assert _unproduced(compared, _producible()) == [(2, "collective-timeot"), (3, "slow-rnak"), (4, "frr-*")]


def test_a_well_spelt_comparison_and_other_vocabularies_pass() -> None:
    source = (
        "a = [f for f in fs if f.id == watch_ids.SLOW_RANK]\n"
        "b = [f for f in fs if f.id in WAITED]\n"
        'c = v.sample.status == "dead" and j.id == wanted\n'
        "d = [f for f in fs if f.id.startswith(flight_ids.PREFIX)]\n"
        "e = episode.kind == watch_ids.SLOW_NODE\n"
    )
    namespace = {"watch_ids": watch_ids, "flight_ids": flight_ids, "WAITED": frozenset({"gloo-timeout"})}
    compared = compared_ids(ast.parse(source), namespace)
    assert sorted(compared) == [(1, "slow-rank"), (2, "gloo-timeout"), (4, "fr-*"), (5, "slow-node")]
    assert _unproduced(compared, _producible()) == []


# --- the catalogues


@pytest.mark.parametrize("catalogue", sorted(CATALOGUES))
def test_each_constant_is_named_for_its_id_and_each_id_named_once(catalogue: str) -> None:
    ids = ids_of(catalogue)
    assert ids, f"{catalogue}: an empty catalogue"
    assert {k: v for k, v in ids.items() if k != re.sub(r"[-.]", "_", v).upper()} == {}
    assert len(set(ids.values())) == len(ids)


def test_the_wire_keeps_the_ids_it_had() -> None:
    """A sample of each catalogue, spelt as the JSON of earlier releases and the README spell them."""
    assert watch_ids.SLOW_RANK == "slow-rank" and watch_ids.P2P_DEADLOCK == "p2p-deadlock"
    assert flight_ids.FR_NOT_JOINED == "fr-not-joined" and logs_ids.COLLECTIVE_TIMEOUT == "collective-timeout"
    assert run_ids.RANK_LEFT_EARLY == "rank-left-early" and run_ids.EXIT_CODE == "exit-code"
    assert smoke_ids.LAUNCH_FAILED == "launch-failed" and smoke_ids.FINGERPRINT_NCCL == "fingerprint-nccl"
    assert env_ids.IB_GID_INDEX == "ib.gid_index" and env_ids.ENV_VARS == "env.vars"


def test_every_flight_id_has_the_prefix_its_users_ask_for() -> None:
    assert [v for v in ids_of("flight").values() if not v.startswith(flight_ids.PREFIX)] == []


def test_a_logs_constant_is_an_id_a_rule_or_a_builder_produces() -> None:
    assert sorted(set(ids_of("logs").values()) - _producible()) == []


def test_the_code_built_ids_are_no_rule_ids() -> None:
    """An id means one thing: a rule of ``logs`` and a builder of another command never share one."""
    coded = {v for c in CATALOGUES if c != "logs" for v in ids_of(c).values()}
    assert sorted(coded & RULE_IDS) == []


def test_every_code_catalogue_constant_is_used() -> None:
    """A constant nobody builds from is an id that never reaches the wire: gone, or misspelt where it is built."""
    used = {ref for _, tree in _modules() for node in ast.walk(tree) if (ref := _catalogue_ref(node)) is not None}
    unused = [(c, k) for c in CATALOGUES if c != "logs" for k in ids_of(c) if (c, k) not in used]
    assert unused == []


# --- the package


def test_no_builder_or_module_spells_an_id() -> None:
    found = []
    for rel, tree in _modules():
        if TABLES.search(rel):
            continue
        found += [(rel, line, s) for line, s in spelt_ids(tree, ALL_IDS) if (rel, s) not in OTHER_MEANING]
    assert found == []


def test_every_builder_takes_its_id_from_its_commands_catalogue() -> None:
    wrong = []
    for rel, tree in _modules():
        owner = next((cat for prefix, cat in OWNER if rel.startswith(prefix)), None)
        for line, cat, name in built_from(tree):
            if name not in ids_of(cat):
                wrong.append((rel, line, f"{cat}_ids.{name} is no id"))
            elif owner is not None and cat != owner:
                wrong.append((rel, line, f"{cat}_ids.{name} built in {owner}'s code"))
    assert wrong == []


def test_every_builder_in_a_commands_code_is_found() -> None:
    """The scan sees the builders: each command's code builds from its catalogue (a rename of Finding would leave
    the two tests above checking nothing)."""
    seen = {
        owner
        for rel, tree in _modules()
        if (owner := next((cat for prefix, cat in OWNER if rel.startswith(prefix)), None)) and built_from(tree)
    }
    assert seen == set(CATALOGUES)


def test_every_compared_id_is_one_a_rule_or_builder_produces() -> None:
    producible = _producible()
    wrong = [(rel, line, s) for rel, found in _compared_in_package() for line, s in _unproduced(found, producible)]
    assert wrong == []


def test_the_comparisons_are_found() -> None:
    """The scan sees the comparisons the package makes of each kind (a sample of each)."""
    seen = {rel: {s for _, s in found} for rel, found in _compared_in_package()}
    assert "slow-node" in seen["analysis/run/verdict.py"]  # episode.kind == watch_ids.SLOW_NODE
    assert "gloo-timeout" in seen["model/findings.py"]  # f.id in WAITED
    assert "fr-*" in seen["analysis/watch/flight.py"]  # f.id.startswith(flight_ids.PREFIX)
    assert "launch-failed" in seen["commands/smoke/__init__.py"]
    assert "unrecognised-error" in seen["analysis/logs/diagnose.py"]  # f.id == UNRECOGNISED.id


def test_the_saved_tree_needs_are_keyed_by_check_ids() -> None:
    assert sorted(set(NEEDS) - set(ids_of("env").values())) == []
