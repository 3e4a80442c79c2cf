"""Fold framed log lines into findings, per-rank NCCL views, watchdog timeouts and torchrun's failure summary.

A single pass with bounded state (evidence and timeouts are capped). Cross-line checks
(cross_rank.py) run once at the end over the per-rank summaries; verdict.py picks the root cause.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from ncclcheck.analysis.logs import crashes, events
from ncclcheck.analysis.logs.cross_rank import annotate_timeouts, cross_checks
from ncclcheck.analysis.logs.failure_tables import distinct_tables, first_failed
from ncclcheck.analysis.logs.fingerprints import Fingerprints
from ncclcheck.analysis.logs.frame import header
from ncclcheck.analysis.logs.gate import Gate
from ncclcheck.analysis.logs.line_facts import (
    CHILD,
    ENTRY,
    FACTS,
    UNRECOGNISED,
    LineFacts,
    RuleMatch,
    facts,
    format_message,
)
from ncclcheck.analysis.logs.nccl import RETRIED, Key, RankFold, key_of
from ncclcheck.analysis.logs.prefixes import rest_parts
from ncclcheck.analysis.logs.restarts import Launch, recovered, several_runs
from ncclcheck.analysis.logs.rules import CONNECT_FIX, RULES, TRAIL_RULES, Rule
from ncclcheck.analysis.logs.verdict import PEER_LOST, root_cause
from ncclcheck.analysis.rank_exits import signal_of
from ncclcheck.model.findings import Evidence, Finding, by_severity
from ncclcheck.model.ids import logs as logs_ids
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.logs import ChildFailure, LogLine, RankLog, Timeout
from ncclcheck.probes._sysfs import parse_int

MAX_EVIDENCE = 5
# Every line that feeds a finding, a timeout, the transport map or torchrun's summary holds one of these.
_TRIGGERS = {r.literal for r in RULES} | {"NCCL", "Error: ", "Exception: ", "Failures:", "Root Cause", "exitcode"}
_TRIGGERS |= set(events.ALARM_WORDS) | set(events.LITERALS)  # the safety net reads these lines: never skipped
# every line of torchrun's failure summary (its keys as torchrun pads them): a piece that is only counted never
# falls inside one and cuts it short (what is read must not depend on where a chunk ends)
_TRIGGERS |= {"time      : ", "host      : ", "rank      : ", "error_file: ", "traceback : "}
_TRIGGERS |= set(crashes.LITERALS)  # a crash's block: its frames, thread headers and end (crashes.py)
GATE = Gate.of(_TRIGGERS)
# An exception Python's unraisable hook printed and ignored (a destructor's, an atexit callback's): the process went on
IGNORED = Rule(
    logs_ids.EXCEPTION_IGNORED,
    "warning",
    "Exception ignored ",
    crashes.IGNORED,  # the line that opens the report (``CrashFold`` reads it; this rule gives the finding its words)
    "Python ignored an exception and went on (a destructor's or an atexit callback's, printed by its unraisable"
    " hook): {error}",
    "harmless by itself when the job went on or ended well (a DataLoader's workers torn down at exit print one);"
    " if it repeats every step, fix the object whose __del__ raises",
)
MAX_TIMEOUTS = 10_000  # also the most torchrun failure entries kept
At = tuple[str, int, str, str | None, str | None, int | None, str | None, int | None]
"""A line as its parts, a LogLine's fields in order: file, number, text, host, pid, dev, level, prefix rank."""


@dataclass
class _Found:
    rule: Rule
    message: str
    order: int
    ranks: set[int] = field(default_factory=set)
    keys: list[Key] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    others: list[str] = field(default_factory=list)
    count: int = 0
    sites: dict[int, str] = field(default_factory=dict)  # rank -> the user's call site its traceback named
    named: set[int] = field(default_factory=set)  # ranks the message itself names as the cause (desync report)
    by_rank: dict[int, str] = field(default_factory=dict)  # each rank's first message (the lead: the first failing's)


class LogFold:
    """Feed it LogLines in file order (or their parts: ``add_line``); ``result()`` gives the LogReport."""

    def __init__(self) -> None:
        self.nccl = RankFold()
        self.found: dict[str, _Found] = {}
        self.timeouts: list[Timeout] = []
        self.failures: list[ChildFailure] = []
        self._child: dict[str, object] | None = None
        self._section: str | None = None
        self._table = 0  # failure tables ended so far: each torchrun agent prints its own
        self.lines = 0
        self.seen: set[int] = set()  # every rank some line names: who is in these logs at all
        self.site: dict[int | None, str] = {}  # each rank's innermost user frame in its latest traceback
        self._fr_stack: set[int | None] = set()  # ranks whose Flight Recorder stack is being read
        # (prefix rank, seq) -> the process group, its name and the rank in it, of a work its watchdog named
        self._pg_work: dict[tuple[int | None, int], tuple[str, str | None, int]] = {}
        self._thrown: Evidence | None = None  # the first traceback or C++ exception's frames: an error was raised
        self._timeout_prefixes: list[int | None] = []  # each timeout's launcher-prefix rank (None: its text's, or none)
        self.crashes = crashes.CrashFold()  # faulthandler blocks, agent exits, dead threads
        self.prints = Fingerprints()  # TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprints of each rank's collective
        self._torch_files: set[str] = set()  # files with a line outside NCCL's own that says something
        self._launches: list[Launch] = []  # torchrun's start banners: several runs in these logs

    def skip(self, count: int, ranks: frozenset[int] = frozenset()) -> None:
        """Lines read but not parsed (``quiet`` said they hold nothing), from these ranks (their launcher
        prefixes): they count, the ranks are present, and they end a torchrun block."""
        self.lines += count
        for rank in ranks:
            if len(self.seen) < MAX_TIMEOUTS:
                self.seen.add(rank)
        self._close_child()
        self._section = None

    def feed(self, line: LogLine) -> None:
        self.add_line(line.file, line.line, line.text, line.host, line.pid, line.dev, line.level, line.rank)

    def run(self, count: int, ranks: frozenset[int], anonymous: bool = False) -> None:
        """``count`` lines whose text says nothing (``LineFacts.quiet``), folded elsewhere, from these ranks (and from
        none, if ``anonymous``)."""
        self.lines += count
        if len(self.seen) < MAX_TIMEOUTS:
            self.seen |= ranks
        if self._fr_stack:  # a line of that rank's own, not a frame: its stack has ended
            self._fr_stack -= ranks
            if anonymous:
                self._fr_stack.discard(None)

    def add_line(
        self,
        file: str,
        number: int,
        text: str,
        host: str | None = None,
        pid: str | None = None,
        dev: int | None = None,
        level: str | None = None,
        prefix_rank: int | None = None,
        nccl: bool = True,
    ) -> None:
        """One framed line given as its parts (a LogLine's fields; no LogLine is made: evidence keeps the text).
        ``nccl=False``: its NCCL view was folded elsewhere (``RankFold.merge``)."""
        self.lines += 1
        if level is not None and nccl:
            self.nccl.add_line(file, number, text, host, pid, dev, prefix_rank)
        said = FACTS.get(text) or facts(text)
        rank = prefix_rank if prefix_rank is not None else said.text_rank
        if rank is not None and len(self.seen) < MAX_TIMEOUTS:
            self.seen.add(rank)
        if level in said.quiet and not self._fr_stack:
            return  # what ``run`` does for lines like it
        if level is None:
            self._torch_files.add(file)  # a line that says something outside NCCL's own: not an NCCL_DEBUG_FILE
        if said.launch and said.time is not None and len(self._launches) < MAX_TIMEOUTS:
            self._launches.append((file, number, said.time))
        line = (file, number, text, host, pid, dev, level, prefix_rank)  # a LogLine's fields: made for evidence
        if said.hits_only and not self._open_block():  # the commonest line that says something: nothing below
            for one in said.said:  # but its findings reads or changes for it
                self._hit(one, line, rank)
            return
        if said.site is not None and len(self.site) < MAX_TIMEOUTS:
            self.site[rank] = said.site
        if self._fr_stack and self._fr_frame(said, line, rank):
            return
        if said.fr_start:
            self._fr_stack.add(rank)
        if said.thrown and self._thrown is None and prefix_rank not in self.crashes.ignoring:
            self._thrown = Evidence(file, number, text[:500])
        if said.pg_work is not None and len(self._pg_work) < MAX_TIMEOUTS:
            seq, pg, desc, in_group = said.pg_work
            self._pg_work[(prefix_rank, seq)] = (pg, desc, in_group)
        if said.said and self.crashes.ignoring and self.crashes.ignored(prefix_rank, file, number):
            self._hit(RuleMatch(IGNORED, IGNORED.message.format(error=text.strip()[:200])), line, rank)  # went on
        else:
            for one in said.said:
                self._hit(one, line, rank)
        matched = bool(said.said)
        if said.crash is not None:
            matched = self.crashes.line(said.crash, file, number, text, prefix_rank, said.time) or matched
        elif self.crashes.open:
            self.crashes.other(prefix_rank)
        if said.said and self.crashes.pending:
            self.crashes.exception(prefix_rank, text, self.site.get(rank))
        if said.watchdog and said.timeout is not None:  # one it cannot read (a terminal cut it) is left to the net
            if len(self.timeouts) < MAX_TIMEOUTS:
                self.timeouts.append(Timeout(rank, *said.timeout[:7], file, number, *said.timeout[7:]))
                self._timeout_prefixes.append(prefix_rank)
            matched = True
        in_summary = self._child is not None or self._section is not None
        if ((said.torchrun or said.summary or in_summary) and self._torchrun(text)) or in_summary:
            matched = True
        if not matched and said.unrecognised is not None and said.alarmed(level):
            self._hit(said.unrecognised, line, rank)

    def _open_block(self) -> bool:
        """Whether a block spans lines here: a Flight Recorder stack, a crash's, torchrun's summary."""
        return bool(
            self._fr_stack
            or self.crashes.open
            or self.crashes.pending
            or self.crashes.ignoring
            or self._child is not None
            or self._section is not None
        )

    def add_nccl_line(self, file: str, number: int, head: str, msg: str, prefix_rank: int | None) -> None:
        """``add_line`` of a line whose NCCL header is given as printed (``frame.header``)."""
        host, pid, dev, src, level = header(head)
        self.add_line(file, number, f"{src} {msg}" if src else msg, host, pid, dev, level, prefix_rank)

    def add_prefixed_line(self, file: str, number: int, rest: str, prefix_rank: int) -> None:
        """``add_line`` of a line's text behind torchrun's rank prefix (``frame.rest_parts``)."""
        self.add_line(file, number, *rest_parts(rest)[:5], prefix_rank)

    def _fr_frame(self, said: LineFacts, line: At, rank: int | None) -> bool:
        """A frame of a Flight Recorder stack: the first in the user's code is the failed collective's site."""
        if rank not in self._fr_stack:
            return False
        if said.fr_frame is None:
            self._fr_stack.discard(rank)
            return False
        user, site = said.fr_frame
        if user:
            self._fr_stack.discard(rank)
            self._hit(site, line, rank)
        return True

    def _hit(self, said: RuleMatch, line: At, rank: int | None) -> None:
        file, number, text, host, pid, dev, level, prefix_rank = line
        rule, message = said.rule, said.message
        found = self.found.get(rule.id)
        if found is None:
            found = self.found[rule.id] = _Found(rule, message, len(self.found))
        elif message != found.message and message not in found.others and len(found.others) < MAX_EVIDENCE:
            found.others.append(message)
        found.count += 1
        if said.named and len(found.named) < 64:
            found.named.update(said.named)
        if rule.own and rank is not None and len(found.named) < 64:
            found.named.add(rank)  # its own call failed the check: this rank is the one at fault
        if rule.id == logs_ids.COLLECTIVE_MISMATCH:
            if self.site.get(rank) and rank is not None:
                found.sites.setdefault(rank, self.site[rank])
            if "CollectiveFingerPrint(" in text:
                self.prints.add(text)
        if rank is not None:
            found.ranks.add(rank)
            if len(found.by_rank) < 64:
                found.by_rank.setdefault(rank, message)
        elif level is not None and len(found.keys) < 64:
            found.keys.append(key_of(file, host, pid, dev, prefix_rank))
        if len(found.evidence) < MAX_EVIDENCE and all(e.line != number or e.file != file for e in found.evidence):
            found.evidence.append(Evidence(file, number, text[:500]))

    def _torchrun(self, text: str) -> bool:
        """torchrun's ChildFailedError block: sections of ``[N]:`` entries with rank, host, exitcode, signal.

        True when the line belongs to the block (its findings are made from the block as a whole)."""
        stripped = text.strip()
        if stripped.startswith("Failures:") or "Root Cause (first observed failure)" in stripped:
            self._close_child()
            if stripped.startswith("Failures:"):  # a table starts with it (its closing "===" may be cut off)
                self._next_table()
            self._section = "root" if "Root Cause" in stripped else "failures"
            return True
        if self._section is None and ENTRY.fullmatch(stripped):
            self._section = "failures"  # a table whose head is cut off (an excerpt, a log's tail): read what is left
        if self._section is None:
            return False
        if ENTRY.fullmatch(stripped):
            self._close_child()
            self._child = {"root": self._section == "root"}
        elif stripped.startswith(("===", "---")):
            self._close_child()
            if stripped.startswith("==="):
                self._section = None
                self._next_table()
        elif self._child is not None:
            for m in CHILD.finditer(text):
                rank, local, host, code, pid, sig, time = m.groups()
                if rank:
                    self._child.update(rank=int(rank), local=parse_int(local))
                given = (("host", host), ("code", code), ("pid", pid), ("sig", sig), ("time", time))
                self._child.update({k: v for k, v in given if v})
        return True

    def _with_group(self, t: Timeout, prefix: int | None) -> Timeout:
        """A timeout whose own line names no process group, given the group its rank's watchdog named for the same
        work on another line (torch >= 2.4: "[Rank 4] Watchdog caught ... SeqNum=91885" then "[PG ID 2 ... Rank 4]
        Exception ... at work: 91885"); a rank read from the timeout's text was the group's, not the job's."""
        found = self._pg_work.get((prefix, t.seq))
        if t.pg is not None or found is None:
            return t
        pg, desc, in_group = found
        default = pg == "0" or desc == "default_pg"
        return dataclasses.replace(
            t, pg=pg, pg_desc=desc, group_rank=in_group, rank=t.rank if prefix is not None or default else None
        )

    def _next_table(self) -> None:
        """The failure table read so far has ended: what follows is another agent's (or another run's)."""
        if self.failures and self.failures[-1].table == self._table:
            self._table += 1

    def _close_child(self) -> None:
        child, self._child = self._child, None
        if child and "rank" in child and len(self.failures) < MAX_TIMEOUTS:
            code = parse_int(child.get("code"))
            sig = child.get("sig") or signal_of(code)
            self.failures.append(
                ChildFailure(
                    int(str(child["rank"])),
                    child.get("local"),  # type: ignore[arg-type]
                    child.get("host"),  # type: ignore[arg-type]
                    code,
                    sig,  # type: ignore[arg-type]
                    bool(child.get("root")),
                    child.get("time"),  # type: ignore[arg-type]
                    self._table,
                    parse_int(child.get("pid")),
                )
            )

    def result(self) -> LogReport:
        self._close_child()
        if self._pg_work:
            self.timeouts = [self._with_group(t, p) for t, p in zip(self.timeouts, self._timeout_prefixes, strict=True)]
        if self.crashes.agent_times:
            times = self.crashes.agent_times
            self.failures = [dataclasses.replace(f, at=times.get(f.pid or -1)) for f in self.failures]
        self.failures = distinct_tables(self.failures)
        ranks = self.nccl.result()
        first = first_failed(self.failures)
        lead = first.rank if first is not None else None
        found = sorted(self.found.values(), key=lambda f: f.order)
        findings = _without_lone_echoes([self._finding(f, lead) for f in found])
        failures = tuple(self.failures)
        echoes = frozenset(r for fid in PEER_LOST if fid in self.found for r in self.found[fid].ranks)
        findings += self._stuck_retries(findings)
        findings += cross_checks(ranks, tuple(self.timeouts), failures, echoes)
        # torchrun's failure table names every rank it ended, also one that never printed a line of its own
        seen = frozenset(self.seen | {r.rank for r in ranks if r.rank is not None} | {f.rank for f in self.failures})
        findings = self._deaths(findings, failures, seen)
        # the ranks whose own output is here: a launcher's prefix or a rank its text names, torchrun's table, and a
        # rank NCCL's lines name in a log that also holds torch's (not an NCCL_DEBUG_FILE of NCCL's lines alone)
        heard = frozenset(
            self.seen
            | {f.rank for f in self.failures}
            | {r.rank for r in ranks if r.rank is not None and r.file in self._torch_files}
        )
        findings = annotate_timeouts(findings, tuple(self.timeouts), ranks, seen, heard)
        findings += _trail_finding(findings, ranks)
        findings += self._cut_off(findings)
        findings = recovered(findings, MAX_EVIDENCE) + several_runs(self._launches)
        ordered = by_severity(tuple(findings))
        return LogReport(
            ordered, ranks, tuple(self.timeouts), tuple(self.failures), root_cause(findings, self.failures), self.lines
        )

    def _stuck_retries(self, findings: list[Finding]) -> list[Finding]:
        """connect-failed for a process of NCCL before 2.12 whose last retry of a connect no Init COMPLETE followed:
        its connection still failed where its lines end (a job stuck there, or a log cut there); unless NCCL's own
        giving up ("Connect to ... failed") already says so."""
        stuck = self.nccl.stuck()
        if not stuck or any(f.id == logs_ids.CONNECT_FAILED for f in findings):
            return []
        text = stuck[0][2]
        why = (m["why"] if (m := RETRIED.search(text)) else "").strip()
        ranks = sorted({r for acc, _, _ in stuck if (r := acc.inferred_rank()) is not None})
        return [
            Finding(
                logs_ids.CONNECT_FAILED,
                "error",
                f"connecting to a peer keeps failing: {why}; NCCL retried it and the process never completed its init"
                f" after ({len(stuck)} process(es))",
                CONNECT_FIX,
                tuple(ranks),
                tuple(Evidence(acc.file, n, t[:500]) for acc, n, t in stuck[:MAX_EVIDENCE]),
            )
        ]

    def _cut_off(self, findings: list[Finding]) -> list[Finding]:
        """A traceback or a C++ exception's frames whose error line is not in these logs (the log was cut, or the
        line went elsewhere): an error was raised, so the verdict stays open, never "pass"."""
        if self._thrown is None or any(f.severity == "error" or f.id == UNRECOGNISED.id for f in findings):
            return []
        return [
            Finding(
                UNRECOGNISED.id,
                "warning",
                "an exception was raised (a traceback or a C++ exception's frames), but its error line is not in these"
                f" logs: {self._thrown.text.strip()[:200]}",
                "the log is cut, or the error went to another stream: read the rank's whole output (stderr too)",
                (),
                (self._thrown,),
            )
        ]

    def _deaths(
        self, findings: list[Finding], failures: tuple[ChildFailure, ...], seen: frozenset[int]
    ) -> list[Finding]:
        """What the crash blocks, the agent's lines and dead threads add (crashes.py): a rule's own native-crash,
        if one read a banner, gives way to the block's, which names the rank and the frame; the banners it read
        (a UCX or Open MPI handler's, which the block does not read) stay in the block's evidence."""
        native = crashes.crash_findings(self.crashes, failures)
        banners = [e for f in findings if f.id == logs_ids.NATIVE_CRASH for e in f.evidence]
        if native:
            findings = [f for f in findings if f.id != logs_ids.NATIVE_CRASH]
            kept = native[0].evidence + tuple(e for e in banners if e not in native[0].evidence)
            native[0] = dataclasses.replace(native[0], evidence=kept[:MAX_EVIDENCE])
        waited = {
            logs_ids.GLOO_TIMEOUT: {r for f in findings if f.id == logs_ids.GLOO_TIMEOUT for r in f.ranks},
            logs_ids.COLLECTIVE_TIMEOUT: {t.rank for t in self.timeouts if t.rank is not None},
        }
        findings = crashes.attribute(findings, self.crashes, failures) + native
        findings += crashes.thread_findings(self.crashes, waited, seen)
        findings += crashes.exit_findings(self.crashes, failures, {f.id for f in findings})
        return crashes.with_backtrace(findings, self.crashes)

    def _finding(self, found: _Found, lead: int | None) -> Finding:
        """A rule's finding: its message is the first rank's to fail (torchrun's tables), else the first read."""
        ranks = set(found.ranks) | {r for k in found.keys if (r := self.nccl.rank_of(k)) is not None}
        count = f" ({found.count} lines)" if found.count > 1 else ""
        message, others = found.message, found.others
        if lead is not None and found.by_rank.get(lead, message) != message:
            message = found.by_rank[lead]
            others = [found.message, *(m for m in others if m != message)]
        also = f"; also: {'; '.join(others)}" if others else ""
        sites = "; ".join(f"rank {r} at {site}" for r, site in sorted(found.sites.items()))
        where = f"; call sites: {sites}" if sites else ""
        named = tuple(sorted(found.named))
        if found.rule.id == logs_ids.COLLECTIVE_MISMATCH and (told := self.prints.told()) is not None:
            message, named = told
            others = [o for o in found.others if "CollectiveFingerPrint" not in o and not o.startswith("ranks call")]
            also = f"; also: {'; '.join(others)}" if others else ""
        return Finding(
            found.rule.id,
            found.rule.severity,
            message + count + also + where,
            found.rule.fix,
            tuple(sorted(ranks | found.named)),
            tuple(found.evidence),
            named,
        )


# A rank's own error that only says a peer went away: the rank showed the failure, it did not start it
# Echoes of an error that another line reports: the result name torch's exception adds (NCCL's error trail is said
# by ``_trail_finding``, on the same terms)
ECHOES_ONLY = frozenset({logs_ids.NCCL_RESULT})


def _trail_finding(findings: list[Finding], ranks: tuple[RankLog, ...]) -> list[Finding]:
    """NCCL's error trail, the echo of the error that starts it: said only when no other line reports an error (an
    NCCL_DEBUG=INFO log cut before its WARN, a WARN printed elsewhere), as what is left of a failure."""
    trails = sorted((r.file, r.trail[0], r.trail[1], r.rank) for r in ranks if r.trail is not None)
    if not trails or any(f.severity == "error" or f.id == UNRECOGNISED.id for f in findings):
        return []
    text = trails[0][2]
    rule = next((r for r in TRAIL_RULES if r.literal in text and r.pattern.search(text)), TRAIL_RULES[1])
    match = rule.pattern.search(text)
    message = format_message(rule.message, {"src": match["src"]} if match else {})
    ranks_of = tuple(sorted({r for *_, r in trails if r is not None}))
    evidence = tuple(Evidence(f, n, t[:500]) for f, n, t, _ in trails[:MAX_EVIDENCE])
    return [Finding(rule.id, rule.severity, message, rule.fix, ranks_of, evidence)]


def _without_lone_echoes(findings: list[Finding]) -> list[Finding]:
    """NCCL's error trail and result lines echo the error that starts them: said only when no other line reports
    one (an NCCL_DEBUG=INFO log cut before its WARN, an exception printed elsewhere), as what is left of a failure."""
    reported = any(f.id not in ECHOES_ONLY and (f.severity == "error" or f.id == UNRECOGNISED.id) for f in findings)
    return [f for f in findings if not (reported and f.id in ECHOES_ONLY)]


def quiet(chunk: str) -> bool:
    """Whether no line of ``chunk`` can matter: none holds a rule's literal or an NCCL/torch/torchrun marker."""
    return not GATE.hit(chunk)


def analyse(lines: Iterable[LogLine]) -> LogReport:
    fold = LogFold()
    for line in lines:
        fold.feed(line)
    return fold.result()
