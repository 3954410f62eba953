"""The OpenVINO Core and device checks.

One ``ov.Core`` per process: it only caches plugins, and fxvino never calls
``Core.set_property`` on it, so sharing it leaks no state between compiled models.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.utils.dtypes import SIXTEEN_BIT_FLOATS
from fxvino.utils.thread_binding import plugin_load_without_binding

VIRTUAL_DEVICES = ("AUTO", "MULTI", "HETERO", "BATCH")


@functools.cache
def _core_and_binding() -> tuple[ov.Core, str]:
    core = ov.Core()
    with plugin_load_without_binding() as decided:
        try:
            core.get_property("CPU", "AVAILABLE_DEVICES")  # loads the plugin, and oneTBB's topology
        except Exception as exc:  # noqa: BLE001 - a build without the CPU plugin still serves other devices
            decided = f"kept: no CPU plugin ({exc})"
    return core, decided


def core() -> ov.Core:
    """The process's Core, with the CPU plugin loaded: where oneTBB's per-inference thread binding
    changes nothing, without it (``utils/thread_binding.py``)."""
    return _core_and_binding()[0]


def thread_binding() -> str:
    """Whether the CPU plugin binds the calling thread around each inference in this process, and why."""
    return _core_and_binding()[1]


def available_devices() -> list[str]:
    return list(core().available_devices)


def check_device(device: str) -> str:
    """Return ``device`` if OpenVINO can run on it, else raise naming the devices it has.

    Virtual devices (``AUTO:GPU,CPU``, ``HETERO:...``) are checked by the devices they list.
    """
    have = available_devices()
    name = device.strip()
    if not name:
        raise ValueError(f"option 'device' is empty; available devices: {', '.join(have)}")
    head, _, rest = name.partition(":")
    virtual = head.upper() in VIRTUAL_DEVICES
    wanted = [d.strip() for d in rest.split(",") if d.strip()] if virtual else [name]
    for d in wanted:
        if d not in have and d.split(".")[0] not in have:
            raise ValueError(
                f"option 'device' got {device!r}: OpenVINO has no device {d!r}; "
                f"available devices: {', '.join(have + list(VIRTUAL_DEVICES))}"
            )
    return name


@functools.cache
def supported_properties(device: str) -> frozenset[str]:
    """Properties the device accepts; used to drop mode defaults a device does not know."""
    try:
        return frozenset(str(p) for p in core().get_property(device.split(":")[0], "SUPPORTED_PROPERTIES"))
    except Exception:  # noqa: BLE001 - virtual devices may not answer; then pass everything
        return frozenset()


_CAPABILITY = {"bf16": "BF16", "f16": "FP16"}


@functools.cache
def capabilities(device: str) -> tuple[str, ...] | None:
    """The physical ``device``'s ``OPTIMIZATION_CAPABILITIES`` (``BF16``, ``FP16``, ``INT8``, ...);
    None when it does not answer."""
    try:
        return tuple(str(c) for c in core().get_property(device.split(":")[0], "OPTIMIZATION_CAPABILITIES"))
    except Exception:  # noqa: BLE001 - virtual devices and some plugins do not answer
        return None


@functools.cache
def warn_if_precision_emulated(device: str, precision: str) -> bool:
    """Warn (once per device and precision) when the device has no kernels for ``precision``:
    OpenVINO then computes in f32 without saying so, and a user asking for bf16 on a CPU without
    AMX or AVX512-BF16 would otherwise never learn why nothing got faster. True if it warned."""
    need = _CAPABILITY.get(precision)
    if need is None or device.split(":")[0] in VIRTUAL_DEVICES:
        return False
    have = capabilities(device)
    if have is None:  # a device that does not answer is not judged
        return False
    log = logging.getLogger("fxvino")
    if need not in have:
        log.warning(
            "fxvino: precision %r was asked for, but %s has no %s kernels (capabilities: %s); OpenVINO computes in f32",
            precision,
            device,
            need,
            ", ".join(have),
        )
        return True
    capped = bf16_capped() if device.split(".")[0] == "CPU" and need == "BF16" else None
    if capped is not None:
        log.warning(
            "fxvino: precision %r was asked for, but %s=%s keeps the CPU plugin's kernels from bf16 "
            "instructions; OpenVINO computes in f32",
            precision,
            capped[0],
            os.environ[capped[0]],
        )
        return True
    return False


def may_run_on_cpu(device: str) -> bool:
    """Whether ``device`` is the CPU, or a virtual device that may pick it."""
    head, _, rest = device.strip().partition(":")
    if head.upper() in VIRTUAL_DEVICES:
        listed = [d.strip().split(".")[0] for d in rest.split(",") if d.strip()]
        return "CPU" in (listed or available_devices())
    return head.split(".")[0] == "CPU"


@functools.cache
def widened_types(device: str) -> frozenset[torch.dtype]:
    """The 16-bit float types ``device`` computes in f32, converting only at its boundaries.

    Under fxvino's f32 inference precision the CPU plugin computes f16 graphs in f32 on every
    CPU, and bf16 graphs on CPUs without bf16 kernels (no AVX512-BF16 or AMX): measured on an
    AMX Xeon, a Zen 5 and, under ``qemu-x86_64 -cpu Haswell``, an AVX2-only CPU. Lowerings round
    such values where PyTorch would (``lowering/rounding.py``). Other devices compute the types
    they are given; a virtual device counts as a CPU when it may run on one."""
    if not may_run_on_cpu(device):
        return frozenset()
    # A CPU that does not answer: round both, which is always right.
    bf16_kernels = "BF16" in (capabilities("CPU") or ()) and bf16_capped() is None
    return frozenset({torch.float16} if bf16_kernels else SIXTEEN_BIT_FLOATS)


# oneDNN's ISA levels (its ``ONEDNN_MAX_CPU_ISA`` values) and which of ``_CPU_EXTENSIONS``
# the CPU plugin's kernels may use at each. AVX2_VNNI_2 has bf16 conversions, but counting it
# without them only makes fxvino round values the plugin already rounded.
_AVX512 = frozenset({"avx2", "avx512f"})
_VNNI = frozenset({"avx2", "vnni"})
_AVX512_VNNI = _AVX512 | {"vnni"}
_ONEDNN_ISA_LEVELS: dict[str, frozenset[str]] = {
    "SSE41": frozenset(),
    "AVX": frozenset(),
    "AVX2": frozenset({"avx2"}),
    "AVX2_VNNI": _VNNI,
    "AVX2_VNNI_2": _VNNI,
    "AVX512_CORE": _AVX512,
    "AVX512_CORE_VNNI": _AVX512_VNNI,
    "AVX512_CORE_BF16": _AVX512_VNNI | {"avx512_bf16"},
    "AVX512_CORE_FP16": _AVX512_VNNI | {"avx512_bf16"},
    "AVX10_1_512": _AVX512_VNNI | {"avx512_bf16"},
    "AVX10_2_512": _AVX512_VNNI | {"avx512_bf16"},
    "AVX512_CORE_AMX": _AVX512_VNNI | {"avx512_bf16", "amx_tile"},
    "AVX512_CORE_AMX_FP16": _AVX512_VNNI | {"avx512_bf16", "amx_tile"},
    "AVX10_1_512_AMX": _AVX512_VNNI | {"avx512_bf16", "amx_tile"},
    "AVX10_1_512_AMX_FP16": _AVX512_VNNI | {"avx512_bf16", "amx_tile"},
    "AVX10_2_512_AMX_2": _AVX512_VNNI | {"avx512_bf16", "amx_tile"},
}


def onednn_isa_cap() -> tuple[str, frozenset[str]] | None:
    """The variable capping the ISA of oneDNN's kernels in this process (``ONEDNN_MAX_CPU_ISA``, or
    its older name ``DNNL_MAX_CPU_ISA``), with the extensions of ``cpu_features`` the cap leaves
    them; None when neither is set to a level oneDNN knows (``ALL``, ``DEFAULT``, unset).

    OpenVINO's CPU plugin picks its kernels, bf16 ones included, by oneDNN's view of the CPU, but
    reports ``OPTIMIZATION_CAPABILITIES`` from CPUID: with ``ONEDNN_MAX_CPU_ISA=AVX2`` on a Zen 5 it
    still listed BF16 while it computed bf16 in f32 and truncated a bf16 output, as on an AVX2-only
    CPU. Read on every call: it is a cheap lookup, and the plugin reads the variable when it loads."""
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        value = os.environ.get(name)
        if value:
            allowed = _ONEDNN_ISA_LEVELS.get(value.strip().upper())
            return None if allowed is None else (name, allowed)
    return None


@functools.cache
def warn_if_isa_capped() -> bool:
    """Warn once per process when a oneDNN ISA cap hides extensions of this CPU from OpenVINO's CPU
    plugin. fxvino follows the cap (it rounds 16-bit values as for the capped class and compiles
    bf16 requests in f32), but the plugin is not consistent under it: with OpenVINO 2026.4 on a
    Zen 5 capped at AVX2, the int8 model ``ov.convert_model`` made of a PT2E ResNet block gave
    results far from PyTorch's simulation, and a 16-bit group norm's training graph crashed it.
    Emulating a CPU (``qemu-x86_64 -cpu Haswell``, ``make test-avx2``) changes what every
    library sees. True if it warned."""
    cap = onednn_isa_cap()
    if cap is None:
        return False
    hidden = cpuid_features() - cap[1]
    if not hidden:
        return False
    logging.getLogger("fxvino").warning(
        "fxvino: %s=%s hides %s of this CPU from OpenVINO's CPU plugin; fxvino rounds 16-bit values "
        "and compiles bf16 requests as for that class, but the plugin is not consistent under the cap "
        "(seen with OpenVINO 2026.4: int8 results off, a crash): to emulate a CPU class, run the "
        "process under an emulator such as qemu-x86_64 -cpu Haswell",
        cap[0],
        os.environ[cap[0]],
        ", ".join(sorted(hidden)),
    )
    return True


def bf16_capped() -> tuple[str, frozenset[str]] | None:
    """The oneDNN ISA cap (:func:`onednn_isa_cap`) if it keeps the CPU plugin's kernels from bf16
    instructions, whatever ``OPTIMIZATION_CAPABILITIES`` says; else None. The plugin then still
    accepts a bf16 inference precision, and fails to compile its matrix products in it ("could not
    create a primitive descriptor for the inner product"), where a CPU without bf16 kernels
    computes in f32."""
    cap = onednn_isa_cap()
    return cap if cap is not None and "avx512_bf16" not in cap[1] else None


# The x86 extensions fxvino's choices depend on, with the probe PyTorch has for each.
# Each extension fxvino asks about, by the names PyTorch's CPUID probe (``torch.cpu.get_capabilities``)
# or /proc/cpuinfo gives it; any one present counts. ``vnni`` is int8 dot products in either
# encoding (``torch.cpu._is_vnni_supported`` checks only AVX-512's): without them oneDNN's u8 x s8
# pair sums saturate (quantization/saturation.py).
_CPU_EXTENSIONS: dict[str, tuple[str, ...]] = {
    "avx2": ("avx2",),
    "avx512f": ("avx512_f", "avx512f"),
    "avx512_bf16": ("avx512_bf16",),
    "amx_tile": ("amx_tile",),
    "vnni": ("avx512_vnni", "avx_vnni"),
}


def cpu_features() -> frozenset[str]:
    """Which of avx2, avx512f, avx512_bf16, amx_tile and vnni OpenVINO's plugin may use in this process:
    what the CPUID instruction says (PyTorch's probes), less what a oneDNN ISA cap
    (:func:`onednn_isa_cap`) takes away. That is what the plugin picks its kernels by."""
    features = cpuid_features()
    cap = onednn_isa_cap()
    return features if cap is None else features & cap[1]


@functools.cache
def cpuid_features() -> frozenset[str]:
    """Which of ``_CPU_EXTENSIONS`` the CPUID instruction gives this process, before any oneDNN
    ISA cap (:func:`cpu_features` takes that off). ``/proc/cpuinfo`` is the kernel's view of the
    host's CPU, which an emulator does not change: under ``qemu-x86_64 -cpu Haswell`` (``make
    test-avx2``) it named AVX-512 and AMX while the plugin ran its AVX2 kernels. It is read only
    where PyTorch lacks the probes."""
    capabilities = getattr(torch.cpu, "get_capabilities", None)
    if callable(capabilities):
        present = {name for name, value in capabilities().items() if value is True}
    else:
        try:
            present = set(Path("/proc/cpuinfo").read_text().split())
        except OSError:
            return frozenset()
    return frozenset(name for name, spellings in _CPU_EXTENSIONS.items() if present.intersection(spellings))


@functools.cache
def cpu_deconvolution_kernel(
    in_channels: int,
    out_channels: int,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    dilation: tuple[int, ...],
    padding: tuple[int, ...],
    output_padding: tuple[int, ...],
) -> str | None:
    """The kernel the CPU plugin runs an f32 transposed convolution with these parameters on (its
    runtime model's ``primitiveType``, such as ``jit_gemm_f32``), or None if it cannot say.

    The choice is the plugin's, per version and CPU class, and does not depend on the input's length
    (checked for 8 against 75 to 12,000 steps) or the weights' values; so a single-op model is compiled
    once per parameter set (20-30 ms) and its answer kept."""
    try:
        spatial = [1 if (k, s, p) == (1, 1, 0) else 8 + 2 * p for k, s, p in zip(kernel, stride, padding, strict=True)]
        x = ops.parameter([1, in_channels, *spatial], ov.Type.f32)
        w = ops.constant(ov.Tensor(ov.Type.f32, ov.Shape([in_channels, out_channels, *kernel])))
        y = ops.convolution_backprop_data(
            x,
            w,
            list(stride),
            pads_begin=list(padding),
            pads_end=list(padding),
            dilations=list(dilation),
            output_padding=list(output_padding),
        )
        compiled = core().compile_model(ov.Model([y], [x]), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        for op in compiled.get_runtime_model().get_ordered_ops():
            info = op.get_rt_info()
            if info["layerType"].astype(str) == "Deconvolution":
                return info["primitiveType"].astype(str)
    except Exception:  # noqa: BLE001 - no CPU plugin, or parameters it rejects: no answer
        return None
    return None
