"""The classifier of errors no rule explains (issue 14, rules/infer.py): its features and
its abstention. The lines are development corpus lines, each from the vllm-ascend issue cited
beside it."""

from __future__ import annotations

from ascend_doctor.rules import load_rules
from ascend_doctor.rules.infer import UNRECOGNISED, Model, tokens, train_docs

# https://github.com/vllm-project/vllm-ascend/issues/397 (d-0092)
HCCL_INIT = (
    "RuntimeError: create:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:89 HCCL function"
    " error: HcclCommInitRootInfo(numRanks, &rootInfo, rank, &(comm->hcclComm_))"
)


def test_tokens_are_words_name_parts_and_code_prefixes() -> None:
    toks = tokens("(EngineCore_DP0 pid=1) ERROR 09-08 02:55:31 [core.py:702] " + HCCL_INIT)
    assert {"runtimeerror", "runtime", "hcclcomminitrootinfo", "hccl", "comm", "init"} <= toks
    assert "core" not in tokens("ERROR 09-08 02:55:31 [core.py:702] x")  # the header is not read
    assert "code:EE" in tokens("EE1023: Too many streams")
    assert not any(t.startswith("0x") or t == "124101423000" for t in tokens("pc 0x124101423000"))


def test_a_text_of_no_known_word_is_left_unrecognised() -> None:
    model = Model.fit([(c, t) for _, c, t in train_docs(load_rules().text)])
    guess = model.predict("zzqx wvvk")
    assert (guess.category, guess.confidence, guess.why) == (UNRECOGNISED, 0.0, ())
    guess = model.predict(HCCL_INIT)
    assert guess.category == "hccl_link_error" and guess.why
    assert set(guess.why) <= tokens(HCCL_INIT)
