"""The family of an error no rule explains, inferred from its words (issue 14, rules/infer.py).

The lines are development corpus lines (tests/corpus/dev/failures.jsonl, each from the
vllm-ascend issue or vendor page cited beside it). Each known-family line is scanned with the
rule that recognises it disabled, as a site would disable it, so it reaches the classifier
the way a line of a wording no rule knows does.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from ascend_doctor.agent.alerts.listener import build_sinks
from ascend_doctor.agent.alerts.routing import route
from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.agent.logwatch import LogWatch
from ascend_doctor.cli import parallel
from ascend_doctor.cli.diagnose import diagnose, report
from ascend_doctor.collectors.log_files import Source
from ascend_doctor.core import cache
from ascend_doctor.core.config import (
    AlertRouteConfig,
    AlertsConfig,
    AlertSinkConfig,
    IncidentsConfig,
    LogsConfig,
)
from ascend_doctor.core.events import Category, Finding, LogChunk, Role
from ascend_doctor.core.store import Store
from ascend_doctor.rules import Engine, RuleSet, load_rules
from ascend_doctor.rules.infer import (
    EVIDENCE,
    MIN_TOKENS,
    PREFIX,
    THRESHOLD,
    UNRECOGNISED,
    Guess,
    Model,
    as_unrecognised,
    is_inferred,
    model_for,
    tokens,
    train_docs,
)
from ascend_doctor.rules.ranking import INFERRED, Ranked, rank_causes, tier

RULES = load_rules()

# https://github.com/vllm-project/vllm-ascend/issues/382 (d-0007)
WATCHDOG = (
    "[rank1]:[E324 13:00:25.428029551 compiler_depend.ts:574] [Rank 1] Watchdog caught"
    " collective operation timeout: WorkHCCL(SeqNum=196, OpType=ALLREDUCE,"
    " Timeout(ms)=3600000) ran for 3600185 milliseconds before timing out."
)
# https://github.com/vllm-project/vllm-ascend/issues/754 (d-0056)
WORKERPROC = (
    "ERROR 05-19 02:31:42 [core.py:396] Exception: WorkerProc initialization failed due to an"
    " exception in a background process. See stack trace for root cause."
)
# https://github.com/hicann/runtime/blob/681ef7610df13c8128982901142a2c869ddbb53e/docs/zh/FAQ/
# EE1023%E8%B5%84%E6%BA%90%E4%B8%8D%E8%B6%B3%E9%97%AE%E9%A2%98.md (d-0151)
STREAMS = (
    "[ERROR] RUNTIME(227839,rtstest_host):2026-07-13-11:39:20.982.566 [capture_model.cc:1802]"
    "227839 AllocSqCqAndBindInternal:Alloc Stream resource failed. Reason: Too many streams are"
    " captured to the ACL Graph. ErrorCode=EE1023."
)
# https://github.com/vllm-project/vllm-ascend/issues/397 (d-0092)
HCCL_INIT = (
    "RuntimeError: create:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:89 HCCL function"
    " error: HcclCommInitRootInfo(numRanks, &rootInfo, rank, &(comm->hcclComm_))"
)
# torch_npu's troubleshooting guide (d-0148): an error no family describes
# https://github.com/Ascend/pytorch/blob/9e73e708ab9350d203475609f36f8a43f6a0c2ab/docs/zh/
# user_guide/troubleshooting/troubleshooting_cases/
# communication_operator_transfers_Non-contiguous_tensors.md
CONTIGUOUS = "RuntimeError: Tensors must be contiguous"
# https://github.com/vllm-project/vllm-ascend/issues/1440 (d-0031), a known one: a rule's
ROOT_CAUSE = (
    "RuntimeError: Failed to load the backend extension: torch_npu. You can disable extension"
    " auto-loading with TORCH_DEVICE_BACKEND_AUTOLOAD=0."
)

CASES = [
    ("torch-npu-hccl-watchdog-timeout", WATCHDOG, Category.HCCL_TIMEOUT),
    ("vllm-workerproc-init-failed", WORKERPROC, Category.ENGINE_DEAD),
    ("rt-hardware-resource-alloc-failed", STREAMS, Category.NPU_RESOURCE_EXHAUSTED),
    ("hccl-comm-init-failed", HCCL_INIT, Category.HCCL_LINK_ERROR),
]


def without(*ids: str) -> RuleSet:
    return dataclasses.replace(RULES, text=tuple(r for r in RULES.text if r.id not in ids))


def scan(text: str, rules: RuleSet = RULES, *, infer: bool = True) -> list[Finding]:
    engine = Engine(rules, clock=lambda: 0.0, matcher="re", infer=infer)
    return engine.scan(LogChunk("server.log", "server", 0, (text + "\n").encode()))


@pytest.mark.parametrize(("rule", "line", "category"), CASES, ids=[c[0] for c in CASES])
def test_a_known_family_no_rule_knows_is_inferred(rule: str, line: str, category: Category) -> None:
    assert [f.category for f in scan(line)] == [category]  # the rule knows it
    (plain,) = scan(line, without(rule), infer=False)
    assert plain.rule == "unrecognised"
    (f,) = scan(line, without(rule))
    assert (f.rule, f.category, f.role) == (f"inferred:{category.value}", category, Role.SYMPTOM)
    assert f.severity == plain.severity and f.offset == plain.offset
    assert f.remediation == () and is_inferred(f)
    assert float(f.captures["confidence"]) >= THRESHOLD
    why = f.captures["inferred_from"].split(", ")
    assert why and set(why) <= tokens(line)
    assert f.summary == (
        f"likely {category.value}, inferred from: {f.captures['inferred_from']}: {plain.summary}"
    )
    assert f.captures["message"] == plain.captures["message"]


def test_an_error_of_no_family_stays_unrecognised() -> None:
    (f,) = scan(CONTIGUOUS)
    assert (f.rule, f.category) == ("unrecognised", Category.UNRECOGNISED)


def test_one_requests_failure_is_never_inferred() -> None:
    """vLLM's serving modules log a refused request with ``logger.exception`` (the ERROR line,
    then the traceback; vllm/entrypoints/openai/serving_completion.py and serving_engine.py
    print these): one request failed, the server is fine, so no family is inferred though
    the words ("maximum context length") resemble a model configuration rule's."""
    serving = "(APIServer pid=1234) ERROR 12-05 10:00:00 [serving_completion.py:140] "
    lines = [
        serving + "Error in preprocessing prompt inputs",
        "Traceback (most recent call last):",
        '  File "/vllm/entrypoints/openai/serving_completion.py", line 128, in create_completion',
        "    raise ValueError(",
        "ValueError: This model's maximum context length is 8192 tokens. However, you requested"
        " 9000 tokens (8990 in the messages, 10 in the completion). Please reduce the length of"
        " the messages or completion.",
    ]
    (f,) = scan("\n".join(lines))
    assert (f.rule, f.category) == ("unrecognised", Category.UNRECOGNISED)
    # the same exception as a server error is inferred: the request is what keeps it out
    (g,) = scan(lines[-1])
    assert g.rule.startswith("inferred:")


def test_tokens_are_words_name_parts_and_code_prefixes() -> None:
    toks = tokens("(EngineCore_DP0 pid=1) ERROR 09-08 02:55:31 [core.py:702] " + HCCL_INIT)
    assert {"runtimeerror", "runtime", "hcclcomminitrootinfo", "hccl", "comm", "init"} <= toks
    assert "core" not in tokens("ERROR 09-08 02:55:31 [core.py:702] x")  # the header is not read
    assert "code:EE" in tokens("EE1023: Too many streams")
    assert not any(t.startswith("0x") or t == "124101423000" for t in tokens("pc 0x124101423000"))


def test_an_inferred_cause_ranks_after_every_rule_and_before_plain_unrecognised(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join([CONTIGUOUS, WATCHDOG, ROOT_CAUSE]) + "\n")
    rules = without("torch-npu-hccl-watchdog-timeout")
    causes = report(diagnose([log], rules), rules)["root_causes"]
    assert [(c["category"], c["rule"]) for c in causes] == [
        ("env_mismatch", "torch-npu-backend-autoload-failed"),
        ("hccl_timeout", "inferred:hccl_timeout"),
        ("unrecognised", "unrecognised"),
    ]
    assert causes[1]["suggestions"] == ["no automatic fix: investigate (see explain)"]
    assert causes[1]["summary"].startswith("likely hccl_timeout, inferred from: ")
    # alone, it is still listed before the plain unrecognised error, never as a rule's cause
    log.write_text("\n".join([CONTIGUOUS, WATCHDOG]) + "\n")
    causes = report(diagnose([log], rules), rules)["root_causes"]
    assert [c["rule"] for c in causes] == ["inferred:hccl_timeout", "unrecognised"]


def test_a_text_of_no_known_word_is_left_unrecognised() -> None:
    model = Model.fit([(c, t) for _, c, t in train_docs(RULES.text)])
    guess = model.predict("zzqx wvvk")
    assert (guess.category, guess.confidence, guess.why) == (UNRECOGNISED, 0.0, ())


TOY = [
    ("hccl_timeout", frozenset({"hccl", "watchdog", "timeout", "collective", "operation"})),
    ("hccl_timeout", frozenset({"hccl", "timeout", "notify", "wait", "task"})),
    ("npu_oom", frozenset({"npu", "out", "memory", "tried", "allocate"})),
    ("npu_oom", frozenset({"npu", "memory", "allocate", "failed", "device"})),
    (UNRECOGNISED, frozenset({"tensors", "must", "be", "contiguous", "runtime"})),
]


def test_n_tokens_weigh_as_evidence_times_their_square_root() -> None:
    """The same ranking as the plain posterior, with the summed log-likelihoods scaled by
    EVIDENCE / sqrt(n): surer than independent tokens would make it below 16 tokens, less
    sure above, where its words repeat one another."""
    model = Model.fit(TOY)
    toks = frozenset({"hccl", "watchdog", "timeout", "task", "wait", "collective", "operation"})
    plain, weighed = model.predict(toks, None), model.predict(toks)
    assert plain.category == weighed.category == "hccl_timeout" and plain.why == weighed.why
    scores = [sum(model.logp[t][i] for t in toks) for i in range(len(model.classes))]
    scaled = [s * EVIDENCE / math.sqrt(len(toks)) for s in scores]
    best = model.classes.index("hccl_timeout")
    want = 1 / sum(math.exp(s - scaled[best]) for s in scaled)
    assert weighed.confidence == pytest.approx(want)
    assert weighed.confidence > plain.confidence  # 7 tokens weigh as 4 sqrt(7) > 7
    model = Model.fit(
        [(c, frozenset(f"{c}{i}" for i in range(30))) for c in ("npu_oom", "host_oom")],
        background=0,  # an even mix of two families is the background's, not either's
    )
    text = frozenset({f"npu_oom{i}" for i in range(20)} | {f"host_oom{i}" for i in range(15)})
    plain, weighed = model.predict(text, None), model.predict(text)
    assert plain.category == weighed.category == "npu_oom"
    assert plain.confidence > weighed.confidence > 0.5  # 35 tokens weigh as 4 sqrt(35) < 35


def test_the_unrecognised_class_counts_every_family_s_words_as_a_background() -> None:
    plain, faint = Model.fit(TOY, background=0), Model.fit(TOY, background=0.5)
    u = faint.classes.index(UNRECOGNISED)
    # "hccl" twice in hccl_timeout's documents: half a count each in the unrecognised class
    total = 5 + 0.5 * sum(len(t) for c, t in TOY if c != UNRECOGNISED) + 0.5 * len(faint.logp)
    assert faint.logp["hccl"][u] == pytest.approx(math.log((0.5 * 2 + 0.5) / total))
    assert plain.logp["hccl"][u] == pytest.approx(plain.unseen[u])
    assert faint.logp["tensors"][u] > faint.unseen[u]


def test_words_any_error_has_are_no_evidence_for_a_family() -> None:
    # d-1160, vllm-ascend #2732: an EZ9999 block of a tiling check no rule knows, whose words
    # ("invalid", "shape", "check", "failed", "workspace") every family writes; inferred
    # env_mismatch before the unrecognised class had the background
    block = (
        "EZ9999: Inner Error!\n"
        "EZ9999: [PID: 191741] 2025-09-03-19:05:48.642.164 cos shape is invalid.[FUNC:GetShape"
        "AttrsInfo][FILE:kv_rms_norm_rope_cache_tiling.cpp][LINE:298]\n"
        "        TraceBack (most recent call last):\n"
        "       KvRmsNormRopeCache do tiling failed, ret is -1.\n"
        "       Check NnopbaseExecutorDoTiling(executor) failed\n"
        "       Check NnopbaseExecutorTilingAndUpdateBinInfo(executor) failed\n"
        "       Check NnopbaseExecutorMatchCache(executor) failed\n"
        "       Check NnopbaseRunForWorkspace(*executor, workspaceSize) failed\n"
    )
    assert [(f.rule, f.category) for f in scan(block)] == [("unrecognised", Category.UNRECOGNISED)]


def test_too_few_known_words_name_no_family() -> None:
    model = Model.fit(TOY)
    few = frozenset({"hccl", "watchdog", "timeout", "collective"} | {"zzqx"})  # one unknown
    assert MIN_TOKENS == 5 and model.predict(few) == Guess(UNRECOGNISED, 0.0, ())
    assert model.predict(few, least=4).category == "hccl_timeout"
    # what the floor keeps out: four words of another server's log weighed as eight
    lmdeploy = "2025-06-01 10:00:00,123 - lmdeploy - ERROR - engine.py:100 - Engine loop failed: x"
    (f,) = scan(lmdeploy)
    assert (f.rule, f.category) == ("unrecognised", Category.UNRECOGNISED)


def test_the_tokens_of_a_no_match_example_are_unrecognised() -> None:
    """A pack's no_match line trains the unrecognised class; a text of exactly its tokens is
    unrecognised even where its family's common words outweigh it: the rule's no_match
    ``KeyError: 'model.layers.3.mlp'`` says a missing key is not a checkpoint mismatch."""
    negative = TOY[-1][1]
    model = Model.fit([*TOY, ("npu_oom", negative), ("npu_oom", negative)])
    assert model.predict(negative, least=1) == Guess(UNRECOGNISED, 0.0, ())
    assert model.predict(negative | {"npu"}, least=1).category == "npu_oom"
    keyerror = "KeyError: 'model.layers.3.mlp'"
    (f,) = scan(keyerror)
    assert (f.rule, f.category) == ("unrecognised", Category.UNRECOGNISED)
    assert any(keyerror in r.examples.get("no_match", ()) for r in RULES.text)


def test_an_inferred_finding_names_no_cause_in_the_chain() -> None:
    assert PREFIX == INFERRED  # the ranking knows the prefix without importing the classifier
    (f,) = scan(WATCHDOG, without("torch-npu-hccl-watchdog-timeout"))
    assert tier(f) == tier(scan(CONTIGUOUS)[0])
    assert rank_causes([Ranked(f, None, (0, 0))]) == []


def test_the_doctor_files_an_inferred_finding_as_unrecognised(tmp_path: Path) -> None:
    """Never remediated (no plan, never due) and never paged as the family it names: a route
    that pages hccl_timeout incidents does not page it."""
    (f,) = scan(WATCHDOG, without("torch-npu-hccl-watchdog-timeout"))
    store = Store.in_dir(tmp_path)
    incidents = IncidentManager(store, IncidentsConfig(window=120.0), clock=lambda: 0.0)
    assert incidents.ingest([f]) == []  # no incident is due for a decision
    (inc,) = store.incidents()
    assert inc.category == Category.UNRECOGNISED and inc.plan == ()
    assert inc.summary.startswith("likely hccl_timeout")
    (kept,) = (x.finding for x in store.findings(inc.id))
    assert (kept.rule, kept.category, kept.remediation) == (
        "inferred:hccl_timeout",
        Category.UNRECOGNISED,
        (),
    )
    pd = AlertSinkConfig(name="pd", type="pagerduty", routing_key_env="PD_KEY")
    routes = (AlertRouteConfig(sinks=("pd",), categories=("hccl_timeout",)),)
    sinks = build_sinks(AlertsConfig(sinks=(pd,), routes=routes), {"PD_KEY": "k" * 32})
    assert route(sinks, routes, inc, "opened") == []
    assert as_unrecognised(scan(WATCHDOG)[0]) == scan(WATCHDOG)[0]  # a rule's finding as it is


def test_the_model_is_built_once_and_read_back_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    rules = without("vllm-workerproc-init-failed")  # a rule set of its own: not memoised yet
    calls: list[int] = []

    def negatives() -> list[str]:
        calls.append(1)
        return [CONTIGUOUS]

    built = model_for(rules, negatives)
    assert calls == [1] and list(tmp_path.glob("infer/*.bin"))
    assert model_for(rules, negatives) is built  # the process's memo
    again = model_for(dataclasses.replace(rules), negatives)  # a new process: the cache
    assert calls == [1] and again == built
    assert Model.load(b"not a model") is None
    assert Model.load(built.dump()) == built


def test_workers_infer_as_one_process_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file cut for worker processes: the inferred findings, their templates (mined in
    file order by the parent) and summaries are those of one process."""
    monkeypatch.setattr(parallel, "BLOCK", 32768)
    block = "\n".join([WATCHDOG, CONTIGUOUS, "INFO 05-19 02:31:40 [core.py:390] ok"]) + "\n"
    (tmp_path / "server.log").write_text(block * 2000)
    rules = without("torch-npu-hccl-watchdog-timeout")
    one = report(diagnose([tmp_path], rules, jobs=1), rules)
    many = report(diagnose([tmp_path], rules, jobs=2), rules)
    assert [c["rule"] for c in one["root_causes"]] == ["inferred:hccl_timeout", "unrecognised"]
    assert one["root_causes"][0]["count"] == 2000
    assert many == one


def test_the_log_watcher_hands_an_inferred_finding_on_as_unrecognised(tmp_path: Path) -> None:
    """What the doctor's daemon is given (its explained-exit check, its incidents, metrics and
    traces) is an unrecognised error whose summary names the likely family."""
    log = tmp_path / "server.log"
    log.write_text(WATCHDOG + "\n" + ROOT_CAUSE + "\n")
    store = Store.in_dir(tmp_path / "state")
    got: list[Finding] = []
    engine = Engine(without("torch-npu-hccl-watchdog-timeout"), matcher="re")
    watch = LogWatch(
        LogsConfig(read_from="beginning", inotify=False),
        store,
        [Source(str(log), "server")],
        engine,
        got.extend,
    )
    try:
        watch.drain()
    finally:
        watch.tailer.close()
        store.close()
    assert [(f.rule, f.category) for f in got] == [
        ("inferred:hccl_timeout", Category.UNRECOGNISED),
        ("torch-npu-backend-autoload-failed", Category.ENV_MISMATCH),
    ]
    assert got[0].summary.startswith("likely hccl_timeout") and got[0].remediation == ()
