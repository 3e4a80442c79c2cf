"""env.vars: names, deprecations, values and NCCL config files, over hand-built environments."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from snapshots import bare, check

from ncclcheck.model.checks import Status
from ncclcheck.probes import envvars


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("NCCL_SOCKET_IFNAMES", "NCCL_SOCKET_IFNAME"),
        ("NCCL_IB_HCAS", "NCCL_IB_HCA"),
        ("NCCL_SOCKET_IF_NAME", "NCCL_SOCKET_IFNAME"),
        ("NCCL_DEBUG_LEVEL", "NCCL_DEBUG"),
        ("NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"),
        ("TORCH_NCCL_BLOCKING_WAITT", "TORCH_NCCL_BLOCKING_WAIT"),
        ("GLOO_SOCKET_IFNAMES", "GLOO_SOCKET_IFNAME"),
    ],
)
def test_misspelt_name_gets_the_real_one(name: str, hint: str) -> None:
    value = {"NCCL_DEBUG": "INFO", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_BLOCKING_WAIT": "1"}.get(
        hint, "x1"
    )
    result = check(bare({name: value}), "env.vars")
    assert result.status is Status.WARN
    assert f"did you mean {hint}?" in result.summary
    assert f"rename {name} to {hint}" in result.fix


def test_unknown_name_without_neighbour() -> None:
    result = check(bare({"NCCL_FROBNICATE_EVERYTHING": "1"}), "env.vars")
    assert result.status is Status.WARN
    assert "not a variable NCCL reads" in result.summary


def test_plugin_and_current_names_are_clean() -> None:
    env = {"NCCL_DEBUG": "INFO", "NCCL_SHARP_DISABLE": "1", "NCCL_TESTS_SPLIT": "x", "TORCH_NCCL_BLOCKING_WAIT": "1"}
    result = check(bare(env), "env.vars")
    assert result.status is Status.OK, result


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS"),
        ("NCCL_IB_GDR_LEVEL", "NCCL_NET_GDR_LEVEL"),
        ("NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT"),
        ("NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING"),
    ],
)
def test_deprecated_and_removed_names_name_their_replacement(name: str, words: str) -> None:
    result = check(bare({name: "4"}), "env.vars")
    assert result.status is Status.WARN
    assert words in result.fix


@pytest.mark.parametrize(
    ("name", "value", "cost"),
    [
        ("NCCL_P2P_DISABLE", "1", "peer-to-peer"),
        ("NCCL_IB_DISABLE", "1", "TCP sockets"),
        ("NCCL_SHM_DISABLE", "1", "shared-memory"),
        ("NCCL_NET_GDR_LEVEL", "PHB", "GPUDirect"),
        ("NCCL_ALGO", "Ring", "algorithms"),
    ],
)
def test_transport_disabling_leftovers_say_what_they_cost(name: str, value: str, cost: str) -> None:
    result = check(bare({name: value}), "env.vars")
    assert result.status is Status.WARN
    assert cost in result.summary
    assert f"unset {name}" in result.fix


def test_disable_zero_is_not_a_leftover() -> None:
    assert check(bare({"NCCL_P2P_DISABLE": "0"}), "env.vars").status is Status.OK


def test_contradiction_ib_disabled_with_hca() -> None:
    result = check(bare({"NCCL_IB_DISABLE": "1", "NCCL_IB_HCA": "mlx5_0"}), "env.vars")
    assert any("NCCL_IB_DISABLE=1 but NCCL_IB_HCA is set" in line for line in result.details)


def test_contradiction_ib_disabled_with_net_ib_fails() -> None:
    result = check(bare({"NCCL_IB_DISABLE": "1", "NCCL_NET": "IB"}), "env.vars")
    assert result.status is Status.FAIL


@pytest.mark.parametrize(
    ("env", "status"),
    [
        ({"TORCH_NCCL_BLOCKING_WAIT": "maybe"}, Status.FAIL),
        ({"TORCH_NCCL_BLOCKING_WAIT": "True"}, Status.OK),
        ({"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "ten"}, Status.FAIL),
        ({"TORCH_DISTRIBUTED_DEBUG": "VERBOSE"}, Status.FAIL),
        ({"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, Status.OK),
        ({"NCCL_ALGO": "Ring,Tree"}, Status.WARN),
        ({"NCCL_ALGO": "Rnig"}, Status.FAIL),
        ({"NCCL_ALGO": "allreduce:ring,tree;broadcast:^nvls"}, Status.WARN),
        ({"NCCL_PROTO": "allreduce:LL128;allgather:Simplex"}, Status.FAIL),
        ({"NCCL_P2P_LEVEL": "pxb"}, Status.WARN),
        ({"NCCL_DEBUG": "VERBOSE"}, Status.WARN),
        ({"NCCL_IB_TIMEOUT": "40"}, Status.WARN),
        ({"NCCL_IB_TIMEOUT": "22"}, Status.OK),
        ({"NCCL_IB_TIMEOUT": "8k"}, Status.WARN),
        ({"NCCL_SOCKET_NTHREADS": "8", "NCCL_NSOCKS_PERTHREAD": "16"}, Status.WARN),
        ({"TORCH_NCCL_BLOCKING_WAIT": "1", "NCCL_BLOCKING_WAIT": "0"}, Status.WARN),
    ],
)
def test_values(env: dict[str, str], status: Status) -> None:
    assert check(bare(env), "env.vars").status is status


def _conf_snapshot(tmp_path: Path, text: str, env: dict[str, str]) -> envvars.EnvFacts:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "nccl.conf").write_text(text)
    return envvars.collect(str(tmp_path), env)


def test_config_file_values_are_effective_but_environment_wins(tmp_path: Path) -> None:
    facts = _conf_snapshot(tmp_path, "NCCL_SOCKET_IFNAMES=eth0\nNCCL_DEBUG=WARN\n# NCCL_X=1\n", {"NCCL_DEBUG": "INFO"})
    snap = dataclasses.replace(bare(), env=facts)
    result = check(snap, "env.vars")
    assert "did you mean NCCL_SOCKET_IFNAME?" in result.summary
    assert any("/etc/nccl.conf:1" in line for line in result.details)
    assert any("NCCL_DEBUG=WARN in /etc/nccl.conf:2 is overridden" in line for line in result.details)


@pytest.mark.parametrize(
    ("line", "words"),
    [("NCCL_DEBUG = WARN", "spaces around '='"), ("export NCCL_DEBUG=WARN", "drop 'export '")],
)
def test_config_file_parser_traps(tmp_path: Path, line: str, words: str) -> None:
    facts = _conf_snapshot(tmp_path, line + "\n", {})
    result = check(dataclasses.replace(bare(), env=facts), "env.vars")
    assert result.status is Status.WARN
    assert words in result.summary + result.fix


def test_user_conf_file_via_nccl_conf_file(tmp_path: Path) -> None:
    conf = tmp_path / "my.conf"
    conf.write_text("NCCL_IB_DISABLE=1\n")
    facts = envvars.collect("/", {"NCCL_CONF_FILE": str(conf)})
    assert ("NCCL_IB_DISABLE", "1", str(conf), 1) in [(v.name, v.value, v.source, v.line) for v in facts.effective]


# NCCL's own parse of integer settings (ncclLoadParam: strtoll(value, NULL, 0)): what NCCL will really do


@pytest.mark.parametrize(
    ("env", "status", "words"),
    [
        (
            {"NCCL_IB_DISABLE": "yes"},
            Status.FAIL,
            "NCCL_IB_DISABLE=yes is not a number: NCCL reads it as 0: IB stays ON",
        ),
        ({"NCCL_IB_DISABLE": "true"}, Status.FAIL, "IB stays ON"),
        ({"NCCL_IB_GID_INDEX": "abc"}, Status.FAIL, "reads it as 0: GID index 0 (link-local on RoCE"),
        ({"NCCL_IB_TIMEOUT": "8k"}, Status.WARN, "reads only its leading number, 8"),
        (
            {"NCCL_IB_TIMEOUT": "99999999999999999999"},
            Status.WARN,
            "out of range: NCCL ignores it and keeps its default",
        ),
        ({"NCCL_SHM_DISABLE": "no"}, Status.WARN, "SHM stays ON"),
    ],
)
def test_integer_values_nccl_misreads_say_what_nccl_does(env: dict[str, str], status: Status, words: str) -> None:
    result = check(bare(env), "env.vars")
    assert result.status is status, result
    assert words in result.summary + " ".join(result.details), result


@pytest.mark.parametrize(
    "env",
    [{"NCCL_IB_DISABLE": "0"}, {"NCCL_IB_GID_INDEX": "3"}, {"NCCL_IB_GID_INDEX": "0x3"}, {"NCCL_IB_TIMEOUT": "022"}],
)
def test_plain_integers_in_any_c_base_are_not_flagged(env: dict[str, str]) -> None:
    assert check(bare(env), "env.vars").status is Status.OK


def test_a_disable_nccl_reads_as_one_is_a_leftover_whatever_its_spelling() -> None:
    for value in ("1", "01", "0x1"):
        result = check(bare({"NCCL_IB_DISABLE": value, "NCCL_IB_HCA": "mlx5_0"}), "env.vars")
        assert "disables InfiniBand" in " ".join(result.details) + result.summary, value
        assert "IB is off, so NCCL_IB_HCA does nothing" in " ".join(result.details), value


def test_nccl_int_is_strtoll() -> None:
    from ncclcheck.analysis.nccl_rules import nccl_int

    assert [nccl_int(t).value for t in ("abc", "yes", "8k", "010", "0x1f", " 3", "-1", "08", "0x")] == [
        0,
        0,
        8,
        8,
        31,
        3,
        -1,
        0,
        0,
    ]
    assert [nccl_int(t).exact for t in ("010", "0x1f", " 3", "8k", "08", "")] == [True, True, True, False, False, False]
    assert nccl_int("99999999999999999999", default=18).value == 18


def test_an_unknown_algo_gets_its_neighbour_once_in_the_users_spelling() -> None:
    result = check(bare({"NCCL_ALGO": "Treee,ring"}), "env.vars")
    text = result.summary + " ".join(result.details)
    assert result.status is Status.FAIL and "unknown token(s): Treee (did you mean Tree?)" in result.summary
    assert "treee" not in text and "forces collective algorithms" not in text  # named once, not also as a leftover


def test_the_variables_check_never_says_no_problem_beside_a_problem() -> None:
    result = check(bare({"NCCL_IB_DISABLE": "yes", "NCCL_DEBUG": "VERBOSE"}), "env.vars")
    assert result.status is Status.FAIL and "no problem found" not in result.summary + " ".join(result.details)
    assert "no problem found" in check(bare({"NCCL_DEBUG": "WARN"}), "env.vars").summary
