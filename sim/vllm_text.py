"""Error texts of the fake server, worded as each release of vLLM / vLLM-Ascend / torch_npu words
them (the source of each is in sim/SOURCES.md). Frames are the traceback lines above the
exception; the process that raised adds its own header (``EngineCore failed to start.``,
``WorkerProc hit an exception.``)."""

from __future__ import annotations

from ascend_doctor.sim.faults import Fault
from ascend_doctor.sim.models import GIB, TOTAL_CAPACITY_GIB, Headroom, MemoryPlan, fmt_gib
from ascend_doctor.sim.versions import VersionProfile

_SITE = "/usr/local/python3.11.13/lib/python3.11/site-packages"
_TB = "Traceback (most recent call last):"

ENGINE_START_FRAMES = f"""{_TB}
  File "{_SITE}/vllm/v1/engine/core.py", line 699, in run_engine_core
    engine_core = EngineCoreProc(*args, **kwargs)
  File "{_SITE}/vllm/v1/engine/core.py", line 498, in __init__
    super().__init__(vllm_config, executor_class, log_stats,"""

KV_FRAMES = f"""{ENGINE_START_FRAMES}
  File "{_SITE}/vllm/v1/engine/core.py", line 92, in __init__
    self._initialize_kv_caches(vllm_config)
  File "{_SITE}/vllm/v1/engine/core.py", line 199, in _initialize_kv_caches
    kv_cache_configs = get_kv_cache_configs(vllm_config, kv_cache_specs,
  File "{_SITE}/vllm/v1/core/kv_cache_utils.py", line 1243, in get_kv_cache_configs
    check_enough_kv_cache_memory(vllm_config, kv_cache_spec_one_worker,
  File "{_SITE}/vllm/v1/core/kv_cache_utils.py", line 716, in check_enough_kv_cache_memory
    raise ValueError("""

DEVICE_FRAMES = f"""{_TB}
  File "{_SITE}/vllm_ascend/worker/worker_v1.py", line 186, in init_device
    device = self._init_device()
  File "{_SITE}/vllm_ascend/worker/worker_v1.py", line 171, in _init_device
    torch.npu.set_device(device)
  File "{_SITE}/torch_npu/npu/utils.py", line 80, in set_device
    torch_npu._C._npu_setDevice(device_id)"""

PROFILE_RUN_FRAMES = f"""{_TB}
  File "{_SITE}/vllm_ascend/worker/worker_v1.py", line 240, in determine_available_memory
    self.model_runner.profile_run()
  File "{_SITE}/vllm_ascend/worker/model_runner_v1.py", line 2290, in profile_run
    hidden_states = self._dummy_run(self.max_num_tokens, with_prefill=True)"""

CAPTURE_FRAMES = f"""{_TB}
  File "{_SITE}/vllm_ascend/worker/model_runner_v1.py", line 3496, in capture_model
    self._capture_model()
  File "{_SITE}/torch_npu/npu/graphs.py", line 222, in capture_end
    super().capture_end()"""

EXECUTE_FRAMES = f"""{_TB}
  File "{_SITE}/vllm/v1/engine/core.py", line 284, in step
    model_output = self.execute_model_with_error_logging(
  File "{_SITE}/vllm_ascend/worker/model_runner_v1.py", line 1801, in execute_model
    hidden_states = self._generate_process_reqs_hidden_states("""

API_FRAMES = f"""{_TB}
  File "/usr/local/python3.11.13/bin/vllm", line 8, in <module>
    sys.exit(main())
  File "{_SITE}/vllm/entrypoints/cli/main.py", line 54, in main
    args.dispatch_function(args)
  File "{_SITE}/vllm/entrypoints/cli/serve.py", line 57, in cmd
    uvloop.run(run_server(args))
  File "{_SITE}/vllm/entrypoints/openai/api_server.py", line 1884, in run_server
    await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)
  File "{_SITE}/vllm/v1/engine/utils.py", line 878, in wait_for_engine_startup
    raise RuntimeError("""

API_DEAD = f"""AsyncLLM output_handler failed.
{_TB}
  File "{_SITE}/vllm/v1/engine/async_llm.py", line 439, in output_handler
    outputs = await engine_core.get_output_async()
  File "{_SITE}/vllm/v1/engine/core_client.py", line 846, in get_output_async
    raise self._format_exception(outputs) from None
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. \
See stack trace (above) for the root cause."""

_DOCS = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


def _gib(n_bytes: float, form: str) -> str:
    # 0.18 introduced format_gib(): round(b / GiB, 2) printed as a float.
    return f"{n_bytes / GIB:.2f}" if form in ("v11", "v13") else f"{round(n_bytes / GIB, 2)}"


def kv_cache_error(plan: MemoryPlan, max_model_len: int, version: VersionProfile) -> str:
    """``check_enough_kv_cache_memory``'s ValueError, as ``version`` words it."""
    form = version.kv_form
    needed, available = plan.needed_bytes(max_model_len), plan.available_bytes
    estimate = plan.estimated_max_len()
    model_s = "model's" if form == "v23" else "models's"
    head = (
        f"ValueError: To serve at least one request with the {model_s} max seq len "
        f"({max_model_len}), ({_gib(needed, form)} GiB KV cache is needed, which is larger "
        f"than the available KV cache memory ({_gib(available, form)} GiB). "
    )
    if form in ("v11", "v13"):
        est = f"Based on the available memory, the estimated maximum model length is {estimate}."
        tail = "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        tail += "initializing the engine."
        text = f"{head}{est if estimate > 0 else ''} {tail}"
        return f"{text} {_DOCS}" if form == "v13" else text
    est = f"Based on the available memory, the estimated maximum model length is {estimate}. "
    util = "`gpu_memory_utilization`"
    if form == "v23":
        util += " (which also controls CPU memory on the CPU backend)"
    return (
        f"{head}{est if estimate > 0 else ''}Try increasing {util} or decreasing "
        f"`max_model_len` when initializing the engine. {_DOCS}"
    )


def no_cache_memory_error(version: VersionProfile) -> str:
    """The ValueError when nothing is left for the KV cache at all."""
    text = (
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine"
    )
    if version.kv_form == "v11":
        return text + "."
    if version.kv_form == "v23":
        text += (
            " (this flag also controls CPU memory reservation on the CPU backend, despite its name)"
        )
    return f"{text}. {_DOCS}"


def free_memory_error(free_gib: float, total_gib: float, util: float) -> str:
    """The worker's ValueError when other processes hold too much of the card."""
    return (
        f"ValueError: Free memory on device ({free_gib:.2f}/{total_gib:.2f} GiB) on startup is "
        f"less than desired GPU memory utilization ({util}, {util * total_gib:.2f} GiB). "
        "Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )


def _pta(pid: int, logical: int, stamp: str) -> str:
    return (
        f"[ERROR] {stamp} (PID:{pid}, Device:{logical}, RankID:-1) ERR00100 PTA call acl api failed"
    )


def set_device_error(pid: int, logical: int) -> str:
    """torch_npu failing to open an unhealthy device (aclrtSetDevice, 507033)."""
    from datetime import datetime

    stamp = datetime.now().strftime("%Y-%m-%d-%H:%M:%S")
    return (
        "RuntimeError: initDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:233 NPU "
        "function error: aclrtSetDevice(device_id_), error code is 507033\n"
        f"{_pta(pid, logical, stamp)}\n"
        "[Error]: Failed to start the device. \n"
        "        Rectify the fault based on the error information in the ascend log."
    )


def capture_error() -> str:
    """ACL graph capture failing on a synchronous copy (107030)."""
    return (
        "RuntimeError: capture_end:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:247 "
        "NPU function error: c10_npu::acl::AclmdlRICaptureEnd(capture_stream_, &model_ri_),"
        " error code is 107030"
    )


def aicore_error(pid: int, device: int) -> str:
    """The AI Core exception block torch_npu prints (vllm-ascend #2976 wording)."""
    return (
        f"RuntimeError: The Inner error is reported as above. The process exits for this inner "
        f"error, and the current working operator name is aclnnMatmul.\n"
        f"EZ9999: [PID: {pid}] The error from device(chipId:{device}, dieId:0), serial number is"
        " 8, there is an exception of aivec error, core id is 40, error code = 0, dump info: pc"
        " start: 0x124101423000, current: 0x12410142395c."
        "[FUNC:ProcessStarsCoreErrorInfo][FILE:device_error_core_proc.cc][LINE:303]"
    )


def oom_error(need: int, h: Headroom, logical: int) -> str:
    """torch_npu's allocator out of memory during a step."""
    total = TOTAL_CAPACITY_GIB * 1024**3
    free = max(0, h.usable_bytes)
    return (
        f"RuntimeError: NPU out of memory. Tried to allocate {fmt_gib(need)} "
        f"(NPU {logical}; {fmt_gib(total)} total capacity; {fmt_gib(h.allocated_bytes)} already "
        f"allocated; {fmt_gib(h.allocated_bytes)} current active; {fmt_gib(free)} free; "
        f"{fmt_gib(h.reserved_bytes)} reserved in total by PyTorch) If reserved memory is >> "
        "allocated memory try setting max_split_size_mb to avoid fragmentation."
    )


def device_fault_error(fault: Fault, pid: int, logical: int, device: int, stamp: str) -> str:
    """A step failing on a faulty card: torch_npu's error and the CANN error block (the
    heartbeat wording is vllm-ascend #8186's)."""
    lines = [
        "RuntimeError: synchronize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:467 NPU "
        f"function error: AclrtSynchronizeStreamWithTimeout(stream), error code is "
        f"{fault.acl_code}",
        _pta(pid, logical, stamp),
    ]
    if fault.acl_text:
        lines.append(f"[Error]: {fault.acl_text}")
    lines += [
        f"[PID: {pid}] {stamp}.135.160 Device_Absent/Abnormal(EL0001): Device not found or "
        "invalid.",
        "        Possible Cause: Device does not exist or is abnormal.",
        "        Solution: Check the error messages in the log.",
        "        TraceBack (most recent call last):",
        f"        rtDeviceSynchronizeWithTimeout execution failed, reason={fault.runtime_reason}"
        "[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:65]",
        "        wait for compute device to finish failed, runtime result = "
        f"{fault.acl_code}.[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:148]",
    ]
    if fault.name == "heartbeat_lost":
        lines.append(
            f"        Device[{device}] lost heartbeat.[FUNC:SyncTask][FILE:direct_hwts_engine.cc]"
            "[LINE:407]"
        )
    return "\n".join(lines)


def engine_init_failed(failed: str) -> str:
    """The API server's uncaught traceback after the engine core failed to start."""
    return (
        f"{API_FRAMES}\n"
        "RuntimeError: Engine core initialization failed. See root cause above. "
        f"Failed core proc(s): {failed}"
    )


def api_value_error(message: str) -> str:
    """The API server's uncaught traceback for a configuration error."""
    head = API_FRAMES.rsplit("\n", 2)[0]
    return f"{head}\nValueError: {message}"
