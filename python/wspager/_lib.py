"""The C library, loaded with ctypes, and its public structs mirrored.

Nothing here is for users: :mod:`wspager` wraps it.  The structs follow
``include/wspager.h`` field by field, reserved space included, so that
their sizes are those of the ``WSPAGER_0.2`` ABI (the tests compare every
offset with the compiler's).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from typing import List, Optional

c_u32 = ctypes.c_uint32
c_u64 = ctypes.c_uint64
c_int = ctypes.c_int
c_uint = ctypes.c_uint
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p

MAX_RANK = 8
DEVICE_HOST = -1

LOG_FN = ctypes.CFUNCTYPE(None, c_void_p, c_char_p)
PROGRESS_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_u64, c_u64)
TRACE_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)


class TraceEvent(ctypes.Structure):
    _fields_ = [
        ("stage", c_int),
        ("layer", c_u32),
        ("begin_ns", c_u64),
        ("end_ns", c_u64),
        ("bytes", c_u64),
        ("thread", c_int),
    ]


STAGES = ("read", "decode", "h2d", "wait", "d2h")


class Tensor(ctypes.Structure):
    _fields_ = [
        ("name", c_char_p),
        ("short_name", c_char_p),
        ("dtype", c_int),
        ("rank", c_uint),
        ("shape", c_u64 * MAX_RANK),
        ("bytes", c_u64),
        ("checksum", c_u64),
        ("layer", c_u32),
        ("data", c_void_p),
        ("reserved", c_u64 * 4),
    ]


class Layer(ctypes.Structure):
    _fields_ = [
        ("index", c_u32),
        ("name", c_char_p),
        ("n_tensors", c_u32),
        ("tensors", ctypes.POINTER(Tensor)),
        ("raw_bytes", c_u64),
        ("stored_bytes", c_u64),
        ("data", c_void_p),
        ("reserved", c_u64 * 4),
    ]


class PackSummary(ctypes.Structure):
    _fields_ = [
        ("n_layers", c_u32),
        ("n_tensors", c_u32),
        ("n_shards", c_u32),
        ("n_sources", c_u32),
        ("n_chunks", c_u64),
        ("raw_bytes", c_u64),
        ("stored_bytes", c_u64),
        ("max_layer_raw_bytes", c_u64),
        ("chunk_bytes", c_u64),
        ("format_version", c_uint),
        ("metadata_json", c_char_p),
        ("reserved", c_u64 * 8),
    ]


class Options(ctypes.Structure):
    _fields_ = [
        ("host_cache_bytes", c_u64),
        ("gpu_slots", c_uint),
        ("device", c_int),
        ("io", c_int),
        ("queue_depth", c_uint),
        ("io_threads", c_uint),
        ("decode_threads", c_uint),
        ("policy", c_int),
        ("lookahead", c_uint),
        ("page_bytes", c_u64),
        ("flags", c_uint),
        ("log", LOG_FN),
        ("log_ctx", c_void_p),
        ("trace", TRACE_FN),
        ("trace_ctx", c_void_p),
        ("on_demand", ctypes.POINTER(c_char_p)),
        ("updated_bytes", c_u64),
        ("overflow_dir", c_char_p),
        ("gpu_packed_bytes", c_u64),
        ("state_bytes", c_u64),
        ("devices", ctypes.POINTER(ctypes.c_int)),
        ("layer_devices", ctypes.POINTER(c_u32)),
        ("n_devices", c_uint),
        ("reserved_u32", c_uint),
        ("reserved", c_u64 * 8),
    ]


class Stats(ctypes.Structure):
    _fields_ = [(name, c_u64) for name in (
        "acquires", "gpu_hits", "host_hits", "misses", "predicted", "prefetches",
        "prefetch_wasted", "host_evictions", "gpu_evictions", "bytes_read",
        "bytes_decoded", "bytes_h2d", "read_ns", "decode_ns", "h2d_ns",
        "acquire_block_ns", "host_cache_bytes", "pinned_bytes", "slot_bytes")] + [
        ("gpu_slots", c_uint),
        ("io_backend", ctypes.c_char * 16),
        ("direct_io", c_int),
        ("staging_bytes", c_u64),
        ("acquire_failures", c_u64),
        ("grad_pushes", c_u64),
        ("bytes_d2h", c_u64),
        ("grad_add_ns", c_u64),
        ("updated_layers", c_u64),
        ("updated_bytes", c_u64),
        ("updated_resident", c_u64),
        ("overflow_written", c_u64),
        ("overflow_read", c_u64),
        ("packed_gpu_hits", c_u64),
        ("packed_gpu_bytes", c_u64),
        ("readahead_left_out", c_u64),
        ("slots_total_bytes", c_u64),
        ("state_held", c_u64),
        ("state_resident", c_u64),
        ("reserved", c_u64 * 1),
    ]


class Grads(ctypes.Structure):
    _fields_ = [
        ("layer", c_u32),
        ("n_tensors", c_u32),
        ("data", ctypes.POINTER(ctypes.POINTER(ctypes.c_float))),
        ("pushes", c_u64),
        ("reserved", c_u64 * 8),
    ]


class ConvertOptions(ctypes.Structure):
    _fields_ = [
        ("level", c_int),
        ("chunk_bytes", c_u64),
        ("shard_bytes", c_u64),
        ("codec", c_int),
        ("transform", c_int),
        ("threads", c_uint),
        ("group_regex", c_char_p),
        ("flags", c_uint),
        ("progress", PROGRESS_FN),
        ("progress_ctx", c_void_p),
        ("log", LOG_FN),
        ("log_ctx", c_void_p),
        ("group_map", ctypes.POINTER(c_char_p)),
        ("layer_order", ctypes.POINTER(c_char_p)),
        ("reserved", c_u64 * 14),
    ]


class AdamWParams(ctypes.Structure):
    _fields_ = [
        ("lr", ctypes.c_double), ("beta1", ctypes.c_double), ("beta2", ctypes.c_double),
        ("eps", ctypes.c_double), ("weight_decay", ctypes.c_double),
        ("step", c_u64),
        ("threads", c_uint),
        ("reserved", c_u64 * 4),
    ]


class Part(ctypes.Structure):
    _fields_ = [("offset", c_u64), ("bytes", c_u64), ("stored_offset", c_u64),
                ("stored_bytes", c_u64)]


STRUCTS = {
    "wsp_tensor": Tensor, "wsp_layer": Layer, "wsp_pack_summary": PackSummary,
    "wsp_options": Options, "wsp_stats": Stats, "wsp_convert_options": ConvertOptions,
    "wsp_grads": Grads, "wsp_adamw": AdamWParams, "wsp_trace_event": TraceEvent,
    "wsp_part": Part,
}
ALL_LAYERS = 0xFFFFFFFF

_SONAME = "libwspager.so.2"
_NATIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native")


def _candidates() -> List[str]:
    """Where the library is looked for, in order."""
    out = []
    env = os.environ.get("WSPAGER_LIBRARY")
    if env:
        out.append(env)
    # An installed wheel carries its own (python/setup.py).
    own = os.path.join(_NATIVE, "libwspager.so")
    if os.path.exists(own):
        out.append(own)
    # A build tree: this file is <top>/python/wspager/_lib.py, builds live in
    # <top> itself or in <top>/build*/ (scripts/build.sh, scripts/test.sh).
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for d in [top] + sorted(glob.glob(os.path.join(top, "build*"))):
        p = os.path.join(d, ".libs", "libwspager.so")
        if os.path.exists(p):
            out.append(p)
    found = ctypes.util.find_library("wspager")
    out.append(found or _SONAME)
    return out


def _load_bundled() -> None:
    """Load the shared libraries a wheel carries beside its libwspager
    (liburing, zstd, ...) first, so that the library's needs are met by
    them (the dynamic linker matches sonames already loaded)."""
    for name in sorted(os.listdir(_NATIVE)):
        if name != "libwspager.so" and ".so" in name:
            ctypes.CDLL(os.path.join(_NATIVE, name), mode=ctypes.RTLD_GLOBAL)


def load() -> ctypes.CDLL:
    """Load libwspager; the error names every place that was tried."""
    tried = []
    for path in _candidates():
        try:
            if os.path.dirname(path) == _NATIVE:
                _load_bundled()
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        _declare(lib)
        return lib
    raise OSError("wspager: cannot load libwspager (set WSPAGER_LIBRARY to its path); tried:\n  "
                  + "\n  ".join(tried))


def _declare(lib: ctypes.CDLL) -> None:
    P = ctypes.POINTER
    sig = {
        "wsp_version_string": (c_char_p, []),
        "wsp_strerror": (c_char_p, [c_int]),
        "wsp_dtype_name": (c_char_p, [c_int]),
        "wsp_dtype_bits": (c_uint, [c_int]),
        "wsp_pack_open": (c_int, [c_char_p, P(c_void_p), c_char_p, ctypes.c_size_t]),
        "wsp_pack_close": (None, [c_void_p]),
        "wsp_pack_errmsg": (c_char_p, [c_void_p]),
        "wsp_pack_summary": (c_int, [c_void_p, P(PackSummary)]),
        "wsp_pack_layer": (P(Layer), [c_void_p, c_u32]),
        "wsp_pack_layer_extent": (c_int, [c_void_p, c_u32, P(c_u32), P(c_u64)]),
        "wsp_pack_shard_path": (c_int, [c_void_p, c_u32, c_char_p, ctypes.c_size_t]),
        "wsp_pack_verify": (c_int, [c_void_p, c_uint, PROGRESS_FN, c_void_p]),
        "wsp_pack_unpack": (c_int, [c_void_p, c_char_p, c_uint, PROGRESS_FN, c_void_p]),
        "wsp_pack_measure_read": (c_int, [c_void_p, c_void_p, c_u64, P(c_u64), P(c_u64)]),
        "wsp_options_init": (None, [P(Options)]),
        "wsp_open": (c_int, [c_char_p, P(Options), P(c_void_p), c_char_p, ctypes.c_size_t]),
        "wsp_close": (None, [c_void_p]),
        "wsp_errmsg": (c_char_p, [c_void_p]),
        "wsp_pager_pack": (c_void_p, [c_void_p]),
        "wsp_layer_device": (c_int, [c_void_p, c_u32, P(ctypes.c_int), P(c_uint)]),
        "wsp_acquire": (c_int, [c_void_p, c_u32, c_void_p, P(P(Layer))]),
        "wsp_acquire_wait": (c_int, [c_void_p, c_u32, c_void_p, P(P(Layer)), c_u64]),
        "wsp_release": (c_int, [c_void_p, c_u32, c_void_p]),
        "wsp_prefetch": (c_int, [c_void_p, c_u32]),
        "wsp_provide": (c_int, [c_void_p, c_u32, c_void_p, c_u64]),
        "wsp_provide_device": (c_int, [c_void_p, c_u32, c_void_p, c_u64, c_void_p]),
        "wsp_pack_read_part": (c_int, [c_void_p, c_u32, c_uint, c_uint, c_void_p, c_u64,
                                       P(Part)]),
        "wsp_hint_next": (c_int, [c_void_p, P(c_u32), ctypes.c_size_t]),
        "wsp_release_view": (c_int, [c_void_p, c_void_p, c_void_p]),
        "wsp_acquire_flags": (c_int, [c_void_p, c_u32, c_void_p, ctypes.c_uint, P(P(Layer))]),
        "wsp_reset_prediction": (None, [c_void_p]),
        "wsp_get_stats": (c_int, [c_void_p, P(Stats)]),
        "wsp_reset_stats": (None, [c_void_p]),
        "wsp_who_decodes": (c_int, [c_void_p]),
        "wsp_grad_push": (c_int, [c_void_p, c_u32, P(c_void_p), c_void_p]),
        "wsp_grad_push_f32": (c_int, [c_void_p, c_u32, c_u32, c_void_p, c_void_p]),
        "wsp_grad_push_rows": (c_int, [c_void_p, c_u32, c_u32, c_void_p, c_u64, c_void_p,
                                       c_void_p]),
        "wsp_grad_query": (c_int, [c_void_p, c_u32]),
        "wsp_grad_wait": (c_int, [c_void_p, c_u32]),
        "wsp_grad_get": (c_int, [c_void_p, c_u32, P(Grads)]),
        "wsp_grad_zero": (c_int, [c_void_p, c_u32]),
        "wsp_state_acquire": (c_int, [c_void_p, c_u32, c_u64, P(c_void_p)]),
        "wsp_state_release": (c_int, [c_void_p, c_u32, c_int]),
        "wsp_state_size": (ctypes.c_int64, [c_void_p, c_u32]),
        "wsp_update": (c_int, [c_void_p, c_u32, P(c_void_p)]),
        "wsp_update_f32": (c_int, [c_void_p, c_u32, P(c_void_p)]),
        "wsp_adamw_step": (c_int, [P(ctypes.c_float), P(ctypes.c_float), P(ctypes.c_float),
                                   P(ctypes.c_float), c_u64, P(AdamWParams)]),
        "wsp_save": (c_int, [c_void_p, c_char_p, c_uint, PROGRESS_FN, c_void_p]),
        "wsp_convert_options_init": (None, [P(ConvertOptions)]),
        "wsp_convert": (c_int, [P(c_char_p), ctypes.c_size_t, c_char_p, P(ConvertOptions),
                                c_char_p, ctypes.c_size_t]),
        "wsp_parse_size": (c_int, [c_char_p, P(c_u64)]),
        "wsp_checksum64": (c_u64, [c_void_p, c_u64]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args


_lib: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    """The loaded library (loaded on first use)."""
    global _lib
    if _lib is None:
        _lib = load()
    return _lib
