"""Every shipped rule through the real loader; every example through the engine."""

from pathlib import Path

import pytest

from ascend_doctor.core.errors import RuleError
from ascend_doctor.core.events import Category, LogChunk, Role, Sample
from ascend_doctor.rules import Engine, load_rules

RULES = load_rules()
ENGINE = Engine(RULES)


def scan_line(line: str, source: str) -> list[str]:
    return [f.rule for f in ENGINE.scan(LogChunk("x.log", source, 0, (line + "\n").encode()))]


@pytest.mark.parametrize("rule", RULES.text, ids=lambda r: r.id)
def test_examples(rule) -> None:  # type: ignore[no-untyped-def]
    source = rule.sources[0]
    for line in rule.examples["match"]:
        assert rule.id in scan_line(line, source), line
    for line in rule.examples.get("no_match", ()):
        assert rule.id not in scan_line(line, source), line


def test_ids_unique_and_categories_valid() -> None:
    ids = [r.id for r in RULES.text] + [r.id for r in RULES.thresholds]
    assert len(ids) == len(set(ids))
    assert {r.category for r in RULES.text} <= set(Category)


def test_kv_estimate_captures() -> None:
    line = (
        "(EngineCore_DP0 pid=276) ERROR 12-02 12:00:01 [core.py:702] ValueError: To serve at "
        "least one request with the models's max seq len (32768), (6.00 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (2.89 GiB). Based on the available "
        "memory, the estimated maximum model length is 16162. Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    )
    data = f"INFO before\n{line}\nTraceback tail\n".encode()
    (f,) = ENGINE.scan(LogChunk("server.log", "server", 1000, data, first_line=10))
    assert f.captures["max_model_len"] == "32768"
    assert f.captures["estimate"] == "16162"
    assert f.offset == 1000 + len(b"INFO before\n")
    assert f.evidence[0].line == 11
    assert [e.text for e in f.evidence] == [line, "INFO before", "Traceback tail"]
    assert f.category == Category.KV_CACHE_INSUFFICIENT and f.role == Role.ROOT
    assert "16162" in f.summary


def test_heartbeat_subject_is_the_device() -> None:
    # the NPU driver's line in the host kernel log (Ascend/mind-cluster kg_parse fixture)
    line = (
        "Aug  1 08:38:31 localhost kernel: [ 1197.584409] [ascend] [ERROR] [drv_soft_fault] "
        "[heart_beat_judge 318] <kworker/5:1H:39365> Heartbeat lost! (device=3; old_count=1104; "
        "new_count=1104; lost_count=4; total_lost_count=4; total_10s_count=0; total_15s_count 0)."
    )
    (f,) = ENGINE.scan(LogChunk("messages", "host", 0, (line + "\n").encode()))
    assert f.subject == "npu3"


def test_rules_only_read_their_sources() -> None:
    line = "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB"
    assert scan_line(line, "server") == ["torch-npu-oom"]
    assert scan_line(line, "plog") == []


def test_threshold_fires_once_per_transition() -> None:
    engine = Engine(RULES)
    bad = Sample("npu_smi", "npu3", 1.0, {"health": "Critical"})
    ok = Sample("npu_smi", "npu3", 2.0, {"health": "OK"})
    assert [f.subject for f in engine.evaluate([bad])] == ["npu3"]
    assert engine.evaluate([bad]) == []
    assert engine.evaluate([ok]) == []
    assert len(engine.evaluate([bad])) == 1


def test_bad_rule_file_names_file_line_and_rule(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text(
        "rules:\n  - id: mine\n    category: nope\n    severity: error\n    source: server\n"
        "    pattern: x\n    summary: s\n    examples: {match: [x]}\n"
    )
    with pytest.raises(RuleError, match=r"site.yaml:2: rule 'mine' key 'category' is 'nope'"):
        load_rules([tmp_path])


def test_bad_pattern(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text(
        "rules:\n  - id: mine\n    category: npu_oom\n    severity: error\n    source: server\n"
        "    pattern: '(unclosed'\n    summary: s\n    examples: {match: [x]}\n"
    )
    with pytest.raises(RuleError, match="pattern does not compile"):
        load_rules([tmp_path])


def test_site_rules_override_and_disable(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text(
        "disable: [vllm-engine-dead]\nrules:\n  - id: torch-npu-oom\n    category: npu_oom\n"
        "    severity: warning\n    source: server\n    pattern: NPU out of memory\n"
        "    summary: oom\n    examples: {match: [NPU out of memory]}\n"
    )
    rules = load_rules([tmp_path])
    ids = {r.id: r for r in rules.text}
    assert "vllm-engine-dead" not in ids
    assert ids["torch-npu-oom"].summary == "oom"


def test_site_rule_overrides_only_the_fields_it_names(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text("rules:\n  - id: torch-npu-oom\n    severity: warning\n")
    rule = next(r for r in load_rules([tmp_path]).text if r.id == "torch-npu-oom")
    assert rule.severity.label == "warning"
    assert rule.category == Category.NPU_OOM  # the rest as shipped
    assert rule.remediation  # kept


def test_disabling_an_unknown_rule_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text("disable: [no-such-rule]\n")
    with pytest.raises(RuleError, match="'disable' names unknown rule 'no-such-rule'"):
        load_rules([tmp_path])


def test_no_summary_of_a_shipped_example_has_a_blank() -> None:
    blanks = []
    for rule in RULES.text:
        for line in rule.examples["match"]:
            chunk = LogChunk("x", rule.sources[0], 0, (line + "\n").encode())
            for f in ENGINE.scan(chunk):
                if f.rule == rule.id and "?" in f.summary:
                    blanks.append((rule.id, f.summary))
    assert blanks == []


def test_optional_parts_of_a_summary() -> None:
    from ascend_doctor.rules import fill

    assert fill("oom[[ on NPU {device}]]", {"device": "3"}) == "oom on NPU 3"
    assert fill("oom[[ on NPU {device}]]", {}) == "oom"
    assert fill("{a} and {b}", {"a": 1}) == "1 and ?"


def test_a_rule_fills_its_templates_as_fill_does() -> None:
    # the engine fills a rule's subject and summary with a _Filler made once per template
    # (fill makes one per call): every template of the packs (and odd ones), with every
    # subset of its names captured (empty captures too), gives what a fill that looks for
    # the [[...]] parts in the template each time gives
    import itertools
    import re

    from ascend_doctor.rules.engine import _Blank, _Filler

    def fill(template: str, values: dict[str, str]) -> str:
        def optional(m: re.Match[str]) -> str:
            names = re.findall(r"\{(\w+)\}", m.group(1))
            return m.group(1) if all(values.get(n) not in (None, "") for n in names) else ""

        if "[[" in template:
            template = re.sub(r"\[\[(.*?)\]\]", optional, template, flags=re.S)
        elif "{" not in template:
            return template
        try:
            return template.format_map(_Blank(values))
        except (ValueError, IndexError):
            return template

    templates = {t for rule in RULES.text for t in (rule.subject, rule.summary)}
    assert sum("[[" in t for t in templates) > 5
    templates |= {"a}}b", "[[x]] {{y}}", "[[ {a}", "{a!r}", "{0}", "[[{a}]][[{b}]] {a}", ""}
    for template in sorted(templates):
        names = sorted(set(re.findall(r"\{(\w+)\}", template)))[:6]
        filler = _Filler(template)
        for n in range(len(names) + 1):
            for chosen in itertools.combinations(names, n):
                for value in ("7", ""):
                    captures = {name: value for name in chosen}
                    assert filler(captures) == fill(template, captures), (template, captures)


def test_levels_keep_a_phrase_in_an_info_line_from_matching(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text(
        """
rules:
  - id: site-frob-failed
    category: engine_dead
    severity: error
    role: root
    source: [server, plog]
    levels: [ERROR, CRITICAL]
    pattern: frobnicator failed
    subject: server
    summary: the frobnicator failed
    explain: x
    remediation: [restart]
    examples:
      match: ["ERROR 01-02 03:04:05 [x.py:1] frobnicator failed"]
      no_match: ["INFO 01-02 03:04:05 [x.py:1] user says: frobnicator failed"]
"""
    )
    engine = Engine(load_rules([tmp_path]), clock=lambda: 0.0)

    def rules_of(text: str, source: str = "server") -> set[str]:
        chunk = LogChunk("x.log", source, 0, (text + "\n").encode(), first_line=1)
        return {f.rule for f in engine.scan(chunk)}

    assert "site-frob-failed" in rules_of("ERROR 01-02 03:04:05 [x.py:1] frobnicator failed")
    assert "site-frob-failed" in rules_of("RuntimeError: frobnicator failed")  # no header
    assert "site-frob-failed" in rules_of(
        "[ERROR] GE(1,python3):2026-01-02-03:04:05.1.2 [x.cc:1]3 frobnicator failed", "plog"
    )
    for quiet in (
        "INFO 01-02 03:04:05 [x.py:1] user says: frobnicator failed",
        "(APIServer pid=1) WARNING 01-02 03:04:05 [x.py:1] frobnicator failed once",
        "[INFO] GE(1,python3):2026-01-02-03:04:05.1.2 [x.cc:1]3 frobnicator failed",
        "2026-01-02 03:04:05,1 - app - INFO - frobnicator failed",
    ):
        assert "site-frob-failed" not in rules_of(quiet), quiet


def test_levels_must_name_known_levels(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text(
        """
rules:
  - id: site-x
    category: engine_dead
    severity: error
    role: root
    source: [server]
    levels: [ERR]
    pattern: x
    subject: server
    summary: x
    explain: x
    remediation: []
    examples:
      match: ["x"]
"""
    )
    with pytest.raises(RuleError, match="levels"):
        load_rules([tmp_path])


def test_every_shipped_rule_that_disrupts_a_server_requires_a_level() -> None:
    # text alone never disrupts a healthy server: a restart or reset needs an error line
    # (or a line without a header), not a phrase quoted at INFO (issue 15, section 1)
    disruptive = {"restart", "reset_device"}
    loose = [
        r.id
        for r in load_rules().text
        if disruptive & {a.name for step in r.remediation for a in step}
        and not (r.levels and r.levels <= {"WARNING", "ERROR", "CRITICAL"})
        and r.id != "hccl-heartbeat-lost"  # HCCL prints its heartbeat status as INFO/EVENT
    ]
    assert loose == []


def test_fill_keeps_an_optional_part_by_the_values_given() -> None:
    # a value of None has no part of its own, yet fills a plain {name} as text
    from ascend_doctor.rules import fill

    assert fill("x[[ on {d}]] {d}", {"d": None}) == "x None"
    assert fill("x[[ on {d}]]", {"d": 0}) == "x on 0"
    assert fill("{n} reqs", {"n": 2.0}) == "2 reqs"


# The wordings the stack itself prints at INFO (or as a plog EVENT) when something is wrong:
# HCCL's heartbeat trace, vLLM's platform resolver and its KV cache sizing, npu-smi's health
# as vllm-ascend's check_health logs it, and pip's "INFO: ... require a different python
# version" (a wheel for another Python).
INFO_WORDINGS = {
    "hccl-heartbeat-lost",
    "vllm-no-platform",
    "vllm-kv-cache-negative-memory",
    "vllm-ascend-available-memory-negative",
    "vllm-kv-cache-less-than-one-request",
    "npu-card-health-not-ok",
    "build-for-another-machine",
}


def test_no_shipped_phrase_rule_reads_an_info_line_but_the_wordings_printed_at_info() -> None:
    # an INFO or DEBUG line reports normal operation: a phrase of a failure in it is a notice,
    # a setting or a quote ("INFO ... Port 29500 is already in use, trying port 29501"), so
    # every phrase rule asks for WARNING or above unless the stack prints its wording at INFO
    # (issue 14); the kernel's log has no levels
    loose = sorted(
        r.id
        for r in load_rules().text
        if (not r.levels or r.levels & {"INFO", "DEBUG"})
        and set(r.sources) != {"host"}
        and r.id not in INFO_WORDINGS
    )
    assert loose == []
    assert all(not r.levels for r in load_rules().text if r.id in INFO_WORDINGS), (
        "an INFO wording rule with levels: drop it from INFO_WORDINGS"
    )
