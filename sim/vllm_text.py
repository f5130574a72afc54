"""Error texts of the fake server's start-up failures, worded as real vLLM-Ascend words them."""

from __future__ import annotations

from datetime import datetime

from ascend_doctor.sim.models import GIB, MemoryPlan

_SITE = "/usr/local/python3.11.13/lib/python3.11/site-packages"

ENGINE_START_FRAMES = f"""Traceback (most recent call last):
  File "{_SITE}/vllm/v1/engine/core.py", line 699, in run_engine_core
    engine_core = EngineCoreProc(*args, **kwargs)
  File "{_SITE}/vllm/v1/engine/core.py", line 498, in __init__
    super().__init__(vllm_config, executor_class, log_stats,"""

_KV_FRAMES = f"""  File "{_SITE}/vllm/v1/engine/core.py", line 92, in __init__
    self._initialize_kv_caches(vllm_config)
  File "{_SITE}/vllm/v1/engine/core.py", line 199, in _initialize_kv_caches
    kv_cache_configs = get_kv_cache_configs(vllm_config, kv_cache_specs,
  File "{_SITE}/vllm/v1/core/kv_cache_utils.py", line 1243, in get_kv_cache_configs
    check_enough_kv_cache_memory(vllm_config, kv_cache_spec_one_worker,
  File "{_SITE}/vllm/v1/core/kv_cache_utils.py", line 716, in check_enough_kv_cache_memory
    raise ValueError("""

_DEVICE_FRAMES = f"""  File "{_SITE}/vllm/v1/engine/core.py", line 83, in __init__
    self.model_executor = executor_class(vllm_config)
  File "{_SITE}/vllm/executor/uniproc_executor.py", line 54, in _init_executor
    self.collective_rpc("init_device")
  File "{_SITE}/vllm_ascend/worker/worker_v1.py", line 186, in init_device
    device = self._init_device()
  File "{_SITE}/vllm_ascend/worker/worker_v1.py", line 171, in _init_device
    torch.npu.set_device(device)
  File "{_SITE}/torch_npu/npu/utils.py", line 80, in set_device
    torch_npu._C._npu_setDevice(device_id)"""

_API_FRAMES = f"""Traceback (most recent call last):
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


def kv_cache_error(plan: MemoryPlan, max_model_len: int) -> str:
    """EngineCore traceback for a max_model_len the KV cache cannot hold (new form)."""
    needed = plan.needed_bytes(max_model_len) / GIB
    return (
        f"EngineCore failed to start.\n{ENGINE_START_FRAMES}\n{_KV_FRAMES}\n"
        f"ValueError: To serve at least one request with the models's max seq len "
        f"({max_model_len}), ({needed:.2f} GiB KV cache is needed, which is larger than the "
        f"available KV cache memory ({plan.available_gib:.2f} GiB). Based on the available "
        f"memory, the estimated maximum model length is {plan.estimated_max_len()}. Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
        "the engine."
    )


def no_cache_memory_error() -> str:
    """EngineCore traceback when nothing is left for the KV cache at all."""
    return (
        f"EngineCore failed to start.\n{ENGINE_START_FRAMES}\n{_KV_FRAMES}\n"
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine."
    )


def free_memory_error(free_gib: float, total_gib: float, util: float) -> str:
    """EngineCore traceback when other processes hold too much of the card."""
    return (
        f"EngineCore failed to start.\n{ENGINE_START_FRAMES}\n{_DEVICE_FRAMES}\n"
        f"ValueError: Free memory on device ({free_gib:.2f}/{total_gib:.2f} GiB) on startup is "
        f"less than desired GPU memory utilization ({util}, {util * total_gib:.2f} GiB). "
        "Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )


def set_device_error(pid: int, logical: int) -> str:
    """EngineCore traceback of torch_npu failing to open an unhealthy device."""
    stamp = datetime.now().strftime("%Y-%m-%d-%H:%M:%S")
    return (
        f"EngineCore failed to start.\n{ENGINE_START_FRAMES}\n{_DEVICE_FRAMES}\n"
        "RuntimeError: initDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:233 NPU "
        "function error: aclrtSetDevice(device_id_), error code is 507033\n"
        f"[ERROR] {stamp} (PID:{pid}, Device:{logical}, RankID:-1) ERR00100 PTA call acl api "
        "failed\n"
        "[Error]: Failed to set the device. Check whether the device is normal."
    )


def engine_init_failed(failed: str) -> str:
    """The API server's uncaught traceback after the engine core failed to start."""
    return (
        f"{_API_FRAMES}\n"
        "RuntimeError: Engine core initialization failed. See root cause above. "
        f"Failed core proc(s): {failed}"
    )


def api_value_error(message: str) -> str:
    """The API server's uncaught traceback for a configuration error."""
    head = _API_FRAMES.rsplit("\n", 2)[0]
    return f"{head}\nValueError: {message}"
