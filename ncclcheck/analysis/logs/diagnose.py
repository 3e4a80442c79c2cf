"""Fold framed log lines into findings, per-rank NCCL views, watchdog timeouts and torchrun's failure summary.

A single pass with bounded state (evidence and timeouts are capped), so a multi-GB log needs
constant memory. Cross-line checks run once at the end over the per-rank summaries.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ncclcheck.analysis.deaths import hint, how, killed, signal_of
from ncclcheck.analysis.flight import FlightReport
from ncclcheck.analysis.logs.gate import Gate
from ncclcheck.analysis.logs.nccl import RankFold, source_key
from ncclcheck.analysis.logs.rules import RULES, SECONDARY_IDS, Rule
from ncclcheck.analysis.ranks import span
from ncclcheck.model.findings import Evidence, Finding, by_severity
from ncclcheck.model.logs import ChildFailure, LogLine, RankLog, Timeout
from ncclcheck.model.run import HangRecord

MAX_EVIDENCE = 5
ANY_LITERAL = re.compile("|".join(sorted({re.escape(r.literal) for r in RULES})))
# Summaries of an error reported elsewhere: the root cause only when nothing more specific is in the logs.
WRAPPERS = frozenset({"nccl-system-error", "child-failed", "python-exception"})
# What a log says when ranks stop agreeing; a Flight Recorder dump says which rank and which call, so it wins.
SYMPTOMS = frozenset({"collective-timeout", "watchdog-stuck", "collective-mismatch"})
EXCEPTION = Rule(
    "python-exception",
    "error",
    "Error",
    re.compile(
        r"^(?:Traceback.*)?(?!nccl)(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)): (?P<what>.{1,300})"
    ),
    "{type}: {what}",
    "the first traceback of the first failing rank is the bug; other ranks' errors are echoes of it",
)
# Every line that feeds a finding, a timeout, the transport map or torchrun's summary holds one of these.
_TRIGGERS = {r.literal for r in RULES} | {"NCCL", "Error: ", "Exception: ", "Failures:", "Root Cause", "exitcode"}
GATE = Gate.of(_TRIGGERS)
MAX_TIMEOUTS = 10_000  # also the most torchrun failure entries kept
TEXT_RANK = re.compile(r"\[(?:PG (?:ID )?\S+ (?:PG GUID \S+ )?)?Rank (\d+)\]|^\[(\d+)\] is setting up NCCL")
WATCHDOG = re.compile(
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<nin>\d+), NumelOut=(?P<nout>\d+))?"
    r", Timeout\(ms\)=(?P<tmo>\d+)\)(?: ran for (?P<ran>\d+) milliseconds)?"
)
PG = re.compile(r"\[PG (?:ID )?(\S+?)(?: PG GUID \S+)? Rank \d+\]")
CHILD = re.compile(
    r"rank\s*:\s*(\d+)(?: \(local_rank: (\d+)\))?|host\s*:\s*(\S+)|exitcode\s*:\s*(-?\d+)|Signal \d+ \((SIG\w+)\)"
)
P2P_OFF = {("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")}
SUSPICIOUS_IF = re.compile(r"^(?:docker|veth|virbr|br-|ip6tnl|tun|tap|lo\b|cni|flannel|cali)")
LINK_LOCAL = re.compile(r"\((?:fe80:|169\.254\.)")


@dataclass(frozen=True)
class LogReport:
    """Everything ``ncclcheck logs`` concluded."""

    findings: tuple[Finding, ...]
    ranks: tuple[RankLog, ...]
    timeouts: tuple[Timeout, ...]
    failures: tuple[ChildFailure, ...]
    root_cause: Finding | None
    lines: int
    flight: FlightReport | None = None

    @property
    def failed(self) -> bool:
        return any(f.severity == "error" for f in self.findings)


@dataclass
class _Found:
    rule: Rule
    message: str
    order: int
    ranks: set[int] = field(default_factory=set)
    keys: list[tuple[str, ...]] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    others: list[str] = field(default_factory=list)
    count: int = 0


class LogFold:
    """Feed it LogLines in file order; ``result()`` gives the LogReport."""

    def __init__(self) -> None:
        self.nccl = RankFold()
        self.found: dict[str, _Found] = {}
        self.timeouts: list[Timeout] = []
        self.failures: list[ChildFailure] = []
        self._child: dict[str, object] | None = None
        self._section: str | None = None
        self.lines = 0

    def skip(self, count: int) -> None:
        """Lines read but not parsed (``quiet`` said they hold nothing); they count, and end a torchrun block."""
        self.lines += count
        self._close_child()
        self._section = None

    def feed(self, line: LogLine) -> None:
        self.lines += 1
        if line.nccl:
            self.nccl.feed(line)
        text = line.text
        rank = line.rank if line.rank is not None else _text_rank(text)
        matched = False
        for rule in RULES if ANY_LITERAL.search(text) else ():
            if rule.literal in text and (match := rule.pattern.search(text)) is not None:
                self._hit(rule, match, line, rank)
                matched = True
        exception = not matched and ("Error: " in text or "Exception: " in text) and "ChildFailedError" not in text
        if exception and (match := EXCEPTION.pattern.match(text)) is not None:
            self._hit(EXCEPTION, match, line, rank)
        if "WorkNCCL(" in text and len(self.timeouts) < MAX_TIMEOUTS:
            self._timeout(line, rank)
        self._torchrun(text)

    def _hit(self, rule: Rule, match: re.Match[str], line: LogLine, rank: int | None) -> None:
        groups = {k: v for k, v in match.groupdict().items() if v}
        message = _format(rule.message, groups)
        found = self.found.get(rule.id)
        if found is None:
            found = self.found[rule.id] = _Found(rule, message, len(self.found))
        elif message != found.message and message not in found.others and len(found.others) < MAX_EVIDENCE:
            found.others.append(message)
        found.count += 1
        if rank is not None:
            found.ranks.add(rank)
        elif line.nccl and len(found.keys) < 64:
            found.keys.append(source_key(line))
        if len(found.evidence) < MAX_EVIDENCE and all(
            e.line != line.line or e.file != line.file for e in found.evidence
        ):
            found.evidence.append(Evidence(line.file, line.line, line.text[:500]))

    def _timeout(self, line: LogLine, rank: int | None) -> None:
        m = WATCHDOG.search(line.text)
        if m is None:
            return
        pg = PG.search(line.text)
        self.timeouts.append(
            Timeout(
                rank, pg.group(1) if pg else None, int(m.group("seq")), m.group("op"), _int(m.group("nin")),
                _int(m.group("nout")), _int(m.group("tmo")), _int(m.group("ran")), line.file, line.line,
            )
        )  # fmt: skip

    def _torchrun(self, text: str) -> None:
        """torchrun's ChildFailedError block: sections of ``[N]:`` entries with rank, host, exitcode, signal."""
        stripped = text.strip()
        if stripped.startswith("Failures:") or "Root Cause (first observed failure)" in stripped:
            self._close_child()
            self._section = "root" if "Root Cause" in stripped else "failures"
            return
        if self._section is None:
            return
        if re.fullmatch(r"\[\d+\]:", stripped):
            self._close_child()
            self._child = {"root": self._section == "root"}
        elif stripped.startswith(("===", "---")):
            self._close_child()
            if stripped.startswith("==="):
                self._section = None
        elif self._child is not None:
            for m in CHILD.finditer(text):
                rank, local, host, code, sig = m.groups()
                if rank:
                    self._child.update(rank=int(rank), local=_int(local))
                self._child.update({k: v for k, v in (("host", host), ("code", code), ("sig", sig)) if v})

    def _close_child(self) -> None:
        child, self._child = self._child, None
        if child and "rank" in child and len(self.failures) < MAX_TIMEOUTS:
            code = _int(child.get("code"))
            sig = child.get("sig") or signal_of(code)
            self.failures.append(
                ChildFailure(
                    int(str(child["rank"])), child.get("local"), child.get("host"),  # type: ignore[arg-type]
                    code, sig, bool(child.get("root")),  # type: ignore[arg-type]
                )
            )  # fmt: skip

    def result(self) -> LogReport:
        self._close_child()
        ranks = self.nccl.result()
        findings = [self._finding(f) for f in sorted(self.found.values(), key=lambda f: f.order)]
        findings += cross_checks(ranks, tuple(self.timeouts), tuple(self.failures))
        findings = _annotate_timeouts(findings, tuple(self.timeouts), ranks)
        ordered = by_severity(tuple(findings))
        return LogReport(
            ordered, ranks, tuple(self.timeouts), tuple(self.failures), root_cause(findings, self.failures), self.lines
        )

    def _finding(self, found: _Found) -> Finding:
        ranks = set(found.ranks) | {r for k in found.keys if (r := self.nccl.rank_of(k)) is not None}
        count = f" ({found.count} lines)" if found.count > 1 else ""
        also = f"; also: {'; '.join(found.others)}" if found.others else ""
        return Finding(
            found.rule.id, found.rule.severity, found.message + count + also, found.rule.fix, tuple(sorted(ranks)),
            tuple(found.evidence),
        )  # fmt: skip


def quiet(chunk: str) -> bool:
    """Whether no line of ``chunk`` can matter: none holds a rule's literal or an NCCL/torch/torchrun marker."""
    return not GATE.hit(chunk)


def analyse(lines: Iterable[LogLine]) -> LogReport:
    fold = LogFold()
    for line in lines:
        fold.feed(line)
    return fold.result()


def with_flight(report: LogReport, flight: FlightReport) -> LogReport:
    """Add what the Flight Recorder dumps say; a hardware or transport error in the logs stays the root cause."""
    logged = [f for f in report.findings if f.severity == "error"]
    hard = [f for f in logged if f.id not in SYMPTOMS | WRAPPERS | SECONDARY_IDS]
    recorded = [f for f in flight.findings if f.severity == "error"]
    cause = (hard or recorded)[0] if hard or recorded else report.root_cause
    findings = by_severity(report.findings + flight.findings)
    return dataclasses.replace(report, findings=findings, root_cause=cause, flight=flight)


def with_hangs(report: LogReport, hangs: Iterable[HangRecord]) -> LogReport:
    """Add the hangs ``ncclcheck run`` caught live: the first one is the root cause over the echoes a hang
    leaves in the logs (timeouts, torchrun's failure table); a hardware or transport error stays the cause."""
    seen = [
        Finding(
            "hang-recorded", "error",
            f"hang seen live{f' on {h.host}' if h.host else ''}: {h.message}",
            "the hang record holds every local rank's stack: " + h.path,
            ranks=h.ranks, culprits=h.culprits,
        )
        for h in hangs
    ]  # fmt: skip
    if not seen:
        return report
    logged = [f for f in report.findings if f.severity == "error"]
    hard = [f for f in logged if f.id not in SYMPTOMS | WRAPPERS | SECONDARY_IDS]
    cause = hard[0] if hard else seen[0]
    return dataclasses.replace(report, findings=by_severity(tuple(seen) + report.findings), root_cause=cause)


def root_cause(findings: Iterable[Finding], failures: Iterable[ChildFailure] = ()) -> Finding | None:
    """The first primary error in log order; else the first error of any kind.

    A rank killed by a crash signal (torchrun's summary) comes before the Python errors of the
    others: they are what its death caused.
    """
    errors = [f for f in findings if f.severity == "error"]
    primary = [f for f in errors if f.id not in SECONDARY_IDS and f.id not in WRAPPERS]
    wrappers = [f for f in errors if f.id in WRAPPERS]
    if killed(tuple(failures)):
        wrappers.sort(key=lambda f: f.id != "child-failed")
    chosen = primary or wrappers or errors
    return chosen[0] if chosen else None


def cross_checks(
    ranks: tuple[RankLog, ...], timeouts: tuple[Timeout, ...], failures: tuple[ChildFailure, ...]
) -> list[Finding]:
    """Findings that need more than one line: versions, link layers, interfaces, timeouts, torchrun summary."""
    out = _version_findings(ranks) + _interface_findings(ranks) + _link_layer_findings(ranks) + _loopback_net(ranks)
    out += _timeout_mismatch(timeouts) + _child_findings(failures)
    return out


def _version_findings(ranks: tuple[RankLog, ...]) -> list[Finding]:
    versions: dict[str, list[RankLog]] = {}
    for r in ranks:
        if r.nccl_version:
            versions.setdefault(r.nccl_version, []).append(r)
    if len(versions) < 2:
        return []
    cores = {v.split("+")[0] for v in versions}
    parts = "; ".join(f"{v} on {', '.join(r.name for r in rs[:4])}" for v, rs in versions.items())
    severity = "error" if len(cores) > 1 else "warning"
    what = "different NCCL versions" if len(cores) > 1 else "the same NCCL built against different CUDA versions"
    evidence = tuple(Evidence(rs[0].file, rs[0].first_line, f"NCCL version {v}") for v, rs in versions.items())
    return [
        Finding(
            "version-mismatch", severity, f"ranks run {what}: {parts}",
            "install one torch/NCCL build on every node (same wheel, same LD_LIBRARY_PATH/LD_PRELOAD)",
            tuple(sorted(r.rank for rs in versions.values() for r in rs if r.rank is not None)), evidence,
        )
    ]  # fmt: skip


def _interface_findings(ranks: tuple[RankLog, ...]) -> list[Finding]:
    out = []
    for r in ranks:
        used = r.bootstrap + r.socket_interfaces
        bad = [i for i in used if SUSPICIOUS_IF.match(i) or LINK_LOCAL.search(i)]
        if bad:
            out.append(
                Finding(
                    "suspicious-interface", "warning",
                    f"{r.name} uses {', '.join(dict.fromkeys(bad))} for NCCL sockets: a bridge, tunnel, loopback or"
                    " link-local address other nodes usually cannot reach",
                    "export NCCL_SOCKET_IFNAME=<the routed interface> (e.g. =eth0 or =^docker,veth,virbr,lo) on every"
                    " node; `ncclcheck env` shows what NCCL picks",
                    (r.rank,) if r.rank is not None else (), (Evidence(r.file, r.first_line, ", ".join(used)),),
                )
            )  # fmt: skip
        env = dict(r.env)
        forced = {k: v for k, v in env.items() if (k, v) in P2P_OFF or (k == "NCCL_P2P_LEVEL" and v in ("LOC", "0"))}
        if forced and not any(f.id == "p2p-disabled" for f in out):
            text = " ".join(f"{k}={v}" for k, v in forced.items())
            out.append(
                Finding(
                    "p2p-disabled", "warning",
                    f"{text} set on {r.name}: GPU peer-to-peer (and shared memory) paths are turned off, traffic takes"
                    " slower routes",
                    "unset them unless you are testing on purpose or P2P is really broken on this machine",
                    (r.rank,) if r.rank is not None else (), (Evidence(r.file, r.first_line, text),),
                )
            )  # fmt: skip
        if "NCCL_SOCKET_IFNAME" in env and not used and not r.init_complete:
            out.append(
                Finding(
                    "socket-ifname-not-found", "error",
                    f"NCCL_SOCKET_IFNAME={env['NCCL_SOCKET_IFNAME']} on {r.name} but NCCL never reports an interface"
                    " it uses: no interface here matches it",
                    "set NCCL_SOCKET_IFNAME to an interface (or prefix) that exists on every node; `ip -br addr`"
                    " or `ncclcheck env` on each node",
                    (r.rank,) if r.rank is not None else (), (Evidence(r.file, r.first_line, "NCCL_SOCKET_IFNAME"),),
                )
            )  # fmt: skip
    return out[:20]


def _link_layer_findings(ranks: tuple[RankLog, ...]) -> list[Finding]:
    for r in ranks:
        layers = {d.rsplit("/", 1)[-1] for d in r.net_devices if "/" in d}
        if {"IB", "RoCE"} <= layers:
            return [
                Finding(
                    "mixed-link-layers", "warning",
                    f"{r.name} uses InfiniBand and RoCE ports together ({' '.join(r.net_devices)})",
                    "restrict NCCL_IB_HCA to ports of one link layer (the ones on the fabric your peers use)",
                    (r.rank,) if r.rank is not None else (), (Evidence(r.file, r.first_line, " ".join(r.net_devices)),),
                )
            ]  # fmt: skip
    return []


def _loopback_net(ranks: tuple[RankLog, ...]) -> list[Finding]:
    """NET transport between two ranks on the same host: intra-node traffic looped through the NIC."""
    host_of = {r.rank: r.host for r in ranks if r.rank is not None and r.host}
    seen = {
        (c.src, c.dst, c.transport): r
        for r in ranks
        for c in r.connections
        if c.kind == "NET" and host_of.get(c.src) and host_of.get(c.src) == host_of.get(c.dst)
    }
    pairs = sorted(seen)
    if not pairs:
        return []
    evidence = tuple(
        Evidence(r.file, r.first_line, f"{r.name}: {a} -> {b} via {t}") for (a, b, t), r in list(seen.items())[:5]
    )
    text = ", ".join(f"{a}->{b} via {t}" for a, b, t in pairs[:6])
    return [
        Finding(
            "intra-node-net", "warning",
            f"ranks on the same host talk through the network: {text} (P2P and SHM were not usable between them)",
            "check `nvidia-smi topo -m` (GPUs split across CPU sockets or PCIe roots) and NCCL_P2P_*/NCCL_SHM_DISABLE;"
            " the job now depends on NIC loopback working",
            tuple(sorted({p for a, b, _ in pairs for p in (a, b)})), evidence,
        )
    ]  # fmt: skip


def _timeout_mismatch(timeouts: tuple[Timeout, ...]) -> list[Finding]:
    by_rank: dict[int, Timeout] = {}
    for t in timeouts:
        if t.rank is not None:
            by_rank.setdefault(t.rank, t)
    steps = {(t.pg, t.seq, t.op) for t in by_rank.values()}
    if len(steps) < 2 or len({pg for pg, _, _ in steps}) > 1:
        return []
    parts = "; ".join(f"rank {r} at SeqNum {t.seq} {t.op}" for r, t in sorted(by_rank.items())[:8])
    return [
        Finding(
            "collective-mismatch", "error", f"ranks timed out in different collectives (desynchronised): {parts}",
            "the ranks issued different collectives or a different number of them: look for rank-dependent branches;"
            " TORCH_DISTRIBUTED_DEBUG=DETAIL or a Flight Recorder dump names the call sites",
            tuple(sorted(by_rank)), tuple(Evidence(t.file, t.line, f"SeqNum={t.seq}, OpType={t.op}") for t in by_rank.values())[:5],
        )
    ]  # fmt: skip


def _child_findings(failures: tuple[ChildFailure, ...]) -> list[Finding]:
    if not failures:
        return []
    reported = next((f for f in failures if f.root_cause), failures[0])
    first = killed(failures) or reported
    fix = hint(first.signal) or "the rank's own traceback is earlier in its output"
    others = sorted({f.rank for f in failures} - {first.rank})
    also = f"; rank(s) {span(others)} failed too" if others else ""
    where = f" on {first.host}" if first.host else ""
    if first is reported:
        message = f"torchrun: rank {first.rank}{where} failed first ({how(first)}){also}"
    else:
        message = (
            f"torchrun: rank {first.rank}{where} was killed ({how(first)}){also}; torchrun's"
            f' "first observed failure" names rank {reported.rank} ({how(reported)}), an echo of it'
        )
    return [Finding("child-failed", "error", message, fix, (first.rank,))]


def _annotate_timeouts(
    findings: list[Finding], timeouts: tuple[Timeout, ...], ranks: tuple[RankLog, ...]
) -> list[Finding]:
    """Add who reported the timeout and who did not (the likely culprits) to collective-timeout findings."""
    reporters = sorted({t.rank for t in timeouts if t.rank is not None})
    if not reporters:
        return findings
    world = max([r.nranks or 0 for r in ranks] + [_group_size(t) for t in timeouts] + [max(reporters) + 1])
    silent = sorted(set(range(world)) - set(reporters))
    note = f"; reported by rank(s) {span(reporters)}" + (
        f"; rank(s) {span(silent)} did not report it: look at them first" if silent else ""
    )
    out = []
    for f in findings:
        if f.id == "collective-timeout":
            f = Finding(f.id, f.severity, f.message + note, f.fix, tuple(reporters), f.evidence)
        out.append(f)
    return out


def _group_size(t: Timeout) -> int:
    if t.numel_in and t.numel_out and t.numel_in != t.numel_out:
        big, small = max(t.numel_in, t.numel_out), min(t.numel_in, t.numel_out)
        return big // small if small and big % small == 0 else 0
    return 0


def _text_rank(text: str) -> int | None:
    m = TEXT_RANK.search(text)
    if not m:
        return None
    return int(m.group(1) or m.group(2))


def _format(template: str, groups: dict[str, str]) -> str:
    values = {k: v.strip() for k, v in groups.items()}
    values.setdefault("peer", values.get("peer2", "?"))
    for name in re.findall(r"{(\w+)}", template):
        values.setdefault(name, "?")
    return template.format(**values)


def _int(text: object) -> int | None:
    try:
        return int(str(text)) if text is not None else None
    except ValueError:
        return None
