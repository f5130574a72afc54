"""The simulator held to captured real outputs (tests/fixtures/real, each with its source).

Values differ (pids, ids, sizes, the chip generation of a capture); wording, field names, their
order and the layout must not.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from simhost_support import ServerRun

from ascend_doctor.sim.host import SimHost

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
Serve = Callable[..., ServerRun]
PAIR = re.compile(r"^\t(?P<name>\S.*?) *: (?P<value>.*)$")


def npu_smi(host: SimHost, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": host.env()["PATH"]}
    env.pop("ASCEND_SIM_STATE", None)
    return subprocess.run(
        ["npu-smi", *args], env=env, input=stdin, capture_output=True, text=True, timeout=10
    )


def names(text: str) -> list[str]:
    """The field names of ``\\tName<pad> : value`` lines, in order."""
    return [m["name"] for ln in text.splitlines() if (m := PAIR.match(ln)) and m["name"].strip()]


def layout(text: str) -> list[str]:
    """Each line with its value replaced: what must be identical."""
    return [PAIR.sub(lambda m: f"\t{m['name'].ljust(30)} : <v>", ln) for ln in text.splitlines()]


def test_every_capture_names_its_source() -> None:
    readme = (REAL / "README.md").read_text()
    for path in REAL.rglob("*.txt"):
        assert f"`{path.relative_to(REAL)}`" in readme, path


def test_health_ok_is_the_real_layout(host: SimHost) -> None:
    real = (REAL / "npu_smi" / "health-ok-910a.txt").read_text()
    assert npu_smi(host, "info", "-i", "0", "-c", "0", "-t", "health").stdout == real


def test_health_of_a_faulty_chip_has_the_real_shape(host: SimHost) -> None:
    real = (REAL / "npu_smi" / "health-alarm-heartbeat-910a.txt").read_text().splitlines()
    host.inject(3, "heartbeat_lost")
    sim = npu_smi(host, "info", "-t", "health", "-i", "3", "-c", "0").stdout.splitlines()
    assert layout("\n".join(sim)) == layout("\n".join(real[:3]))
    assert re.fullmatch(r"[0-9A-F]{8}( [0-9A-F]{8})*", sim[1].split(" : ")[1])
    assert sim[2].split(" : ")[1].endswith("event state=Heartbeat Lost.")


def test_usages_and_board_print_the_real_fields_in_the_real_order(host: SimHost) -> None:
    for args, capture in (
        (("-t", "usages", "-i", "0"), "usages-910a.txt"),
        (("-t", "board", "-i", "0", "-c", "0"), "board-chip-910a.txt"),
        (("-t", "board", "-i", "0"), "board-card-910a.txt"),
    ):
        real = names((REAL / "npu_smi" / capture).read_text())
        sim = names(npu_smi(host, "info", *args).stdout)
        # a 910B prints some fields a 910A does not (Aivector, NPU Utilization): a subsequence
        it = iter(sim)
        missing = [n for n in real if n not in it]
        assert missing == [], (capture, missing)


def test_a_missing_card_is_refused_in_the_real_words(host: SimHost) -> None:
    real = (REAL / "npu_smi" / "invalid-card-id.txt").read_text()
    assert npu_smi(host, "info", "-i", "9", "-t", "board").stdout == real


def test_reset_prompt_and_result_are_the_real_ones(host: SimHost) -> None:
    real = (REAL / "npu_smi" / "reset-card-doc.txt").read_text().splitlines()
    host.set_setting("reset_scope", "chip")
    out = npu_smi(host, "set", "-t", "reset", "-i", "0", "-c", "0", stdin="y\n").stdout
    sim = out.replace("\t", " " * 8).splitlines()
    assert sim[:2] == real[:2]  # the warning and the question, word for word
    assert sim[2] == real[3]  # "Message : resetting ..."
    # a server board reports "Reset server", a standard card "Reset card" (print_reset_result)
    assert sim[3:] == [real[4], real[5].replace("Reset card", "Reset server")]


def test_unknown_flag_is_refused_as_real_vllm_refuses_it(serve: Serve) -> None:
    for version, capture, flag in (
        ("0.13", "unrecognized-arguments-old.txt", "--omni"),
        ("0.18", "unrecognized-arguments-new.txt", "--temperature 0.8"),
    ):
        run = serve("Qwen/Qwen2.5-7B-Instruct", flag.split(), version=version)
        assert run.wait() == 2
        assert run.output() == (REAL / "vllm" / capture).read_text()


def test_process_prefixes_of_newer_vllm(serve: Serve) -> None:
    real = (REAL / "vllm" / "prefixes-new.txt").read_text().splitlines()
    shape = re.compile(
        r"^\((EngineCore|APIServer) pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[\S+:\d+\] "
    )
    assert all(shape.match(ln) for ln in real)
    run = serve("Qwen/Qwen2.5-7B-Instruct", version="0.23")
    run.wait_healthy()
    tags = {m[1] for ln in run.output().splitlines() if (m := shape.match(ln))}
    assert tags == {"EngineCore", "APIServer"}


def test_heartbeat_error_block_has_the_real_lines(serve: Serve, host: SimHost) -> None:
    real = (REAL / "vllm" / "heartbeat-lost-8186.txt").read_text().splitlines()
    run = serve("Qwen/Qwen2.5-7B-Instruct", env={"ASCEND_RT_VISIBLE_DEVICES": "3"})
    run.wait_healthy()
    host.inject(3, "heartbeat_lost")
    assert run.wait() == 0
    out = re.sub(r"\x1b\[[0-9;]*m", "", run.output()).replace("\r", "")
    body = {ln.split("] ", 1)[-1] for ln in out.splitlines()}  # without the log header
    for line in (real[0], real[1], real[7], real[8], real[10], real[11], real[12]):
        assert line in body, line
    assert real[14].replace("Device[0]", "Device[3]") in body
    el0001 = re.compile(r"^\[PID: \d+\] \S+ Device_Absent/Abnormal\(EL0001\): Device not found")
    assert el0001.match(real[9]) and any(el0001.match(b) for b in body)


def test_driver_line_in_the_kernel_log_is_the_real_one(serve: Serve, host: SimHost) -> None:
    real = (REAL / "host" / "messages-heartbeat-lost.txt").read_text()
    run = serve("Qwen/Qwen2.5-7B-Instruct", env={"ASCEND_RT_VISIBLE_DEVICES": "1"})
    run.wait_healthy()
    host.inject(1, "heartbeat_lost")
    assert run.wait() == 0
    sim = host.kernel_log.read_text()
    strip = re.compile(r"^\w{3} [ \d]\d \d\d:\d\d:\d\d localhost kernel: \[ *\d+\.\d+\] ")
    assert strip.sub("", sim) == strip.sub("", real)


def test_ecc_counters_have_the_real_names_in_the_real_order(host: SimHost) -> None:
    sim = npu_smi(host, "info", "-t", "ecc", "-i", "0").stdout
    ecc = [n.strip() for n in names(sim)]
    for capture in ("ecc-910a-doc.txt", "ecc-950-doc.txt"):
        # the documentation's blocks lost npu-smi's leading tab; a 910B prints no DDR lines
        text = (REAL / "npu_smi" / capture).read_text()
        real = [ln.split(" : ")[0].strip() for ln in text.splitlines() if " : " in ln]
        real = [n for n in real if not n.startswith("DDR")]
        it = iter(ecc)
        assert [n for n in real if n not in it] == [], capture
    # the source's layout: "\t%-40s : %u"
    assert all(ln.startswith("\t") and ln[41:44] == " : " for ln in sim.splitlines() if ln)


def test_an_ecc_fault_raises_the_uncorrectable_counts(host: SimHost) -> None:
    host.inject(4, "hbm_ecc")
    text = npu_smi(host, "info", "-t", "ecc", "-i", "4").stdout
    pairs = {m["name"].strip(): m["value"] for ln in text.splitlines() if (m := PAIR.match(ln))}
    assert pairs["HBM Double Bit Error Count"] == "1"
    assert pairs["HBM Double Bit Isolated Pages Count"] == "1"
    assert pairs["HBM Single Bit Error Count"] == "0"
