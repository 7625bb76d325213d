"""wspager: a disk-to-GPU tiered weight pager, from Python.

A thin layer over the C library's public API (``include/wspager.h``): a
pack read-only (:class:`Pack`), the pager (:class:`Pager`), conversion of
safetensors checkpoints (:func:`convert`).  Only numpy is imported here;
:mod:`wspager.torch` pages PyTorch modules.

>>> import wspager
>>> pack = wspager.Pack("model.wsp")
>>> with wspager.Pager("model.wsp", device="host", host_cache="256M") as pg:
...     with pg.acquire("model.layers.2") as layer:
...         w = layer["mlp.up_proj.weight"]        # read-only numpy view

Tensors are views, never copies: on the host backend a read-only numpy array
over the pager's memory, on a GPU a :class:`DeviceTensor` describing slot
memory (``__cuda_array_interface__``).  A view is valid until its layer is
released; reading it later reads whatever the slot holds by then.
"""
from __future__ import annotations

import ctypes
import errno
import operator
import os
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib as _c
from ._handle import Handle, NoCopy

__all__ = ["WspError", "Pack", "Pager", "AcquiredLayer", "DeviceTensor", "TensorInfo",
           "LayerInfo", "convert", "parse_size", "version", "DTYPES"]

#: C enum wsp_dtype -> (name, numpy dtype used for views).  Types numpy
#: lacks are viewed as unsigned integers of the same width.
DTYPES: Dict[int, Tuple[str, str]] = {
    0: ("BOOL", "bool"), 1: ("U8", "uint8"), 2: ("I8", "int8"), 3: ("F8_E5M2", "uint8"),
    4: ("F8_E4M3", "uint8"), 5: ("I16", "int16"), 6: ("U16", "uint16"), 7: ("F16", "float16"),
    8: ("BF16", "uint16"), 9: ("I32", "int32"), 10: ("U32", "uint32"), 11: ("F32", "float32"),
    12: ("F64", "float64"), 13: ("I64", "int64"), 14: ("U64", "uint64"), 15: ("F8_E8M0", "uint8"),
    16: ("C64", "complex64"), 17: ("F4", "uint8"), 18: ("F6_E2M3", "uint8"),
    19: ("F6_E3M2", "uint8"),
}
_SUB_BYTE = {"F4", "F6_E2M3", "F6_E3M2"}

SizeLike = Union[int, str]
WSP_ENOTFOUND = -4104   # include/wspager.h
PathLike = Union[str, bytes, "os.PathLike"]


class WspError(Exception):
    """A failed call of the library: ``code`` is its negative return value
    (``-errno`` or a ``WSP_E*`` code), ``message`` the library's detail."""

    def __init__(self, code: int, message: str):
        self.code = code
        self.message = message
        name = _c.lib().wsp_strerror(code).decode()
        super().__init__(name if not message else message if message.endswith(name)
                         else f"{message} ({name})")


def _check(rc: int, message: Callable[[], str]) -> int:
    if rc < 0:
        raise WspError(rc, message())
    return rc


def version() -> str:
    """The version of the loaded library, "MAJOR.MINOR.PATCH"."""
    return _c.lib().wsp_version_string().decode()


def parse_size(size: SizeLike) -> int:
    """Bytes from an int or a text such as "512M", "8G", "1.5GiB"."""
    if isinstance(size, int) and not isinstance(size, bool):
        if not 0 <= size < 1 << 64:
            raise ValueError(f"size {size} is out of range (0 to 2**64 - 1 bytes)")
        return size
    if not isinstance(size, str):
        raise TypeError(f"size must be bytes (int) or a text such as '8G', not "
                        f"{type(size).__name__}")
    if "\0" in size:
        raise ValueError(f"invalid size {size!r}")
    out = _c.c_u64()
    rc = _c.lib().wsp_parse_size(size.encode(), ctypes.byref(out))
    if rc < 0:
        raise ValueError(f"invalid size {size!r} (give bytes or e.g. '512M', '8G')")
    return out.value


def _host_bytes(obj, what: str, writable: bool = False) -> Tuple[int, int]:
    """(address, size) of host bytes: a contiguous CPU torch tensor, or
    anything with the buffer protocol (bytes, a NumPy array)."""
    if hasattr(obj, "data_ptr"):   # a torch tensor
        if obj.device.type != "cpu" or not obj.is_contiguous():
            raise ValueError(f"{what}: a tensor must be contiguous and on the CPU")
        return obj.data_ptr(), obj.numel() * obj.element_size()
    a = np.frombuffer(obj, dtype=np.uint8)
    if writable and not a.flags.writeable:
        raise ValueError(f"{what}: the buffer is read-only")
    return a.ctypes.data, a.nbytes


class Part(NamedTuple):
    """Part of a layer in its packed form (:meth:`Pack.read_part`)."""
    offset: int          # in the layer's packed form
    bytes: int
    stored_offset: int   # what its reader reads, from the layer's start
    stored_bytes: int


@dataclass(frozen=True)
class TensorInfo:
    """A tensor of a pack: ``dtype`` is the safetensors name ("BF16")."""
    name: str
    short_name: str
    dtype: str
    shape: Tuple[int, ...]
    nbytes: int
    layer: int


@dataclass(frozen=True)
class LayerInfo:
    """A layer (the unit of paging) and its tensors."""
    index: int
    name: str
    tensors: Tuple[TensorInfo, ...]
    raw_bytes: int
    stored_bytes: int


def _tensor_info(t: _c.Tensor) -> TensorInfo:
    return TensorInfo(t.name.decode(), t.short_name.decode(), DTYPES[t.dtype][0],
                      tuple(int(t.shape[i]) for i in range(t.rank)), int(t.bytes), int(t.layer))


def _layer_info(L: _c.Layer) -> LayerInfo:
    return LayerInfo(int(L.index), L.name.decode(),
                     tuple(_tensor_info(L.tensors[i]) for i in range(L.n_tensors)),
                     int(L.raw_bytes), int(L.stored_bytes))


def _progress_fn(progress: Optional[Callable[[int, int], object]]):
    """A C progress callback around `progress(done, total)`; a true return
    value cancels.  The caller keeps the returned object alive."""
    if progress is None:
        return _c.PROGRESS_FN()
    return _c.PROGRESS_FN(lambda _ctx, done, total: 1 if progress(done, total) else 0)


class _Closing(NoCopy):
    """Context manager around ``close()``; no copies, no pickles."""

    def close(self) -> None:  # pragma: no cover - each handle defines it
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _closed_error(message: str) -> "WspError":
    return WspError(-errno.EBADF, message)


def _c_path(path: PathLike) -> bytes:
    """A path for the library: str, bytes or os.PathLike; a NUL inside it
    is refused (the C string would silently end there)."""
    b = os.fsencode(os.fspath(path))
    if b"\0" in b:
        raise ValueError(f"path {path!r} contains a NUL byte")
    return b


def _c_name(name: str, what: str) -> bytes:
    """A name (a layer's, a tensor's) for the library; NUL is refused."""
    if not isinstance(name, str):
        raise TypeError(f"{what}: names are str, not {type(name).__name__}")
    if "\0" in name:
        raise ValueError(f"{what}: name {name!r} contains a NUL character")
    return name.encode()


def _integer(name: str, value, bits: int = 32) -> int:
    """`value` as an unsigned integer of `bits` bits, or TypeError /
    ValueError: ctypes would silently wrap -1 or 2**32, and truncate 1.7."""
    if type(value) is int and 0 <= value < 1 << bits:
        return value   # the common case first: every layer visit passes a stream
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None
    if not 0 <= v < 1 << bits:
        raise ValueError(f"{name} = {v} is out of range (0 to 2**{bits} - 1)")
    return v


class Pack(_Closing):
    """A pack opened read-only.

    Parameters
    ----------
    path : str, bytes or os.PathLike
        The pack directory (``manifest.wspm`` and its shards).

    Attributes
    ----------
    layers : list of LayerInfo
        In pack order; ``pack.layers[i].tensors`` lists each layer's tensors.
    summary : dict
        Counts and sizes (``n_layers``, ``raw_bytes``, ``stored_bytes``, ...).

    A pager's own pack (``Pager.pack``) keeps its pager alive, and raises
    once the pager is closed.
    """

    def __init__(self, path: PathLike, *, _borrowed: Optional[Tuple[Handle, int]] = None):
        cpath = _c_path(path)
        self.path = os.fsdecode(cpath)
        if _borrowed is None:
            h = ctypes.c_void_p()
            buf = ctypes.create_string_buffer(1024)
            rc = _c.lib().wsp_pack_open(cpath, ctypes.byref(h), buf, len(buf))
            _check(rc, lambda: buf.value.decode(errors="replace"))
            self._owner = Handle(h.value, _c.lib().wsp_pack_close, f"pack {self.path}",
                                 _closed_error)
            self._ptr = h.value
        else:
            self._owner, self._ptr = _borrowed
        self._owned = _borrowed is None
        L = _c.lib()
        with self._owner.call():
            s = _c.PackSummary()
            _check(L.wsp_pack_summary(self._ptr, ctypes.byref(s)), self._errmsg)
            self.summary = {name: getattr(s, name) for name, _ in _c.PackSummary._fields_
                            if name not in ("reserved", "metadata_json")}
            self.metadata = s.metadata_json.decode() if s.metadata_json else None
            self.layers: List[LayerInfo] = [
                _layer_info(L.wsp_pack_layer(self._ptr, i).contents) for i in range(s.n_layers)]
        self._by_name = {L.name: L for L in self.layers}

    def _errmsg(self) -> str:
        return _c.lib().wsp_pack_errmsg(self._ptr).decode(errors="replace")

    def layer(self, key: Union[int, str]) -> LayerInfo:
        """A layer by index or name (KeyError / IndexError if absent)."""
        if isinstance(key, str):
            if key not in self._by_name:
                raise KeyError(f"{self.path}: no layer named {key!r}")
            return self._by_name[key]
        return self.layers[key]

    def layer_extent(self, key: Union[int, str]) -> Tuple[str, int, int]:
        """Where a layer's stored bytes are (wsp_pack_layer_extent(3)): the
        shard file's path, the offset in it and the byte count; they are
        contiguous.  For processes that read a part each and exchange the
        parts (:meth:`Pager.provide`)."""
        i = self.layer(key).index
        L = _c.lib()
        shard, offset = ctypes.c_uint32(), ctypes.c_uint64()
        with self._owner.call():
            _check(L.wsp_pack_layer_extent(self._ptr, i, ctypes.byref(shard),
                                           ctypes.byref(offset)), self._errmsg)
            buf = ctypes.create_string_buffer(4096)
            n = L.wsp_pack_shard_path(self._ptr, shard.value, buf, len(buf))
            _check(n if n < 0 else 0, self._errmsg)
            if n >= len(buf):
                buf = ctypes.create_string_buffer(n + 1)
                L.wsp_pack_shard_path(self._ptr, shard.value, buf, len(buf))
        return os.fsdecode(buf.value), offset.value, self.layers[i].stored_bytes

    def read_part(self, key: Union[int, str], part: int, parts: int, out=None) -> "Part":
        """Where part `part` of `parts` of a layer is, in its packed form
        (wsp_pack_read_part(3)): whole chunks, so that `parts` readers read
        the layer once.  With `out` (a writable contiguous CPU tensor or
        array of at least ``bytes``) the part is also read into it and each
        of its chunks checked; a mismatch raises WspError (WSP_ECHECKSUM)
        naming the chunk.  For processes that exchange the parts and decode
        the layer on their GPUs (:meth:`Pager.provide_device`)."""
        i = self.layer(key).index
        if not 0 <= part < parts < 1 << 32:   # the C side takes unsigned ints
            raise ValueError(f"read_part: part {part} of {parts}")
        ptr, cap = (None, 0) if out is None else _host_bytes(out, "read_part", writable=True)
        p = _c.Part()
        with self._owner.call():
            _check(_c.lib().wsp_pack_read_part(self._ptr, i, part, parts, ctypes.c_void_p(ptr),
                                               cap, ctypes.byref(p)), self._errmsg)
        return Part(p.offset, p.bytes, p.stored_offset, p.stored_bytes)

    def measure_read(self, limit: int = 0) -> Tuple[int, float]:
        """Read the shards' stored bytes (`limit` at most; 0: all) through
        the pager's own I/O engine as a cold run issues them, without
        decoding (wsp_pack_measure_read(3)): the disk-side ceiling a cold
        load is judged against.  Returns (bytes read, seconds).  Drop the
        page cache first for a cold figure."""
        L = _c.lib()
        nbytes, ns = ctypes.c_uint64(), ctypes.c_uint64()
        with self._owner.call():
            _check(L.wsp_pack_measure_read(self._ptr, None, _integer("limit", limit, 64),
                                           ctypes.byref(nbytes), ctypes.byref(ns)),
                   self._errmsg)
        return nbytes.value, ns.value / 1e9

    def tensors(self) -> Iterable[TensorInfo]:
        """Every tensor, in pack order."""
        for L in self.layers:
            yield from L.tensors

    def verify(self, threads: int = 0, progress=None) -> None:
        """Decode every chunk and check every checksum and the padding;
        raises WspError naming the shard, layer, tensor and chunk."""
        threads = _integer("threads", threads)
        cb = _progress_fn(progress)
        with self._owner.call():
            _check(_c.lib().wsp_pack_verify(self._ptr, threads, cb, None), self._errmsg)

    def unpack(self, out: PathLike, *, force: bool = False, progress=None) -> None:
        """Write the original safetensors files back, byte for byte."""
        cb = _progress_fn(progress)
        cout = _c_path(out)
        with self._owner.call():
            _check(_c.lib().wsp_pack_unpack(self._ptr, cout, 1 if force else 0, cb, None),
                   self._errmsg)

    @property
    def closed(self) -> bool:
        return self._owner.closed

    def close(self) -> None:
        """Close the pack (a pager's own pack is closed with the pager)."""
        if self._owned:
            self._owner.close()


class DeviceTensor(NoCopy):
    """A tensor in GPU memory (a slot): its address, dtype and shape, and
    ``__cuda_array_interface__`` (version 3, read-only) for CuPy, Numba or
    ``torch.as_tensor``.  Types numpy lacks have ``typestr`` of an unsigned
    integer of the same width; ``dtype`` keeps the real name.  It keeps its
    pager's memory alive (so does what torch or CuPy make of it)."""

    def __init__(self, ptr: int, dtype: str, shape: Tuple[int, ...], nbytes: int,
                 owner: object = None):
        self.ptr, self.dtype, self.shape, self.nbytes = ptr, dtype, shape, nbytes
        self._owner = owner

    @property
    def __cuda_array_interface__(self) -> dict:
        np_dtype = np.dtype(_view_dtype(self.dtype))
        return {"shape": self.shape, "typestr": np_dtype.str, "data": (self.ptr, True),
                "version": 3, "strides": None, "stream": None}

    def __repr__(self) -> str:
        return f"DeviceTensor({self.dtype}, shape={self.shape}, ptr=0x{self.ptr:x})"


def _view_dtype(name: str) -> str:
    for _, (n, v) in DTYPES.items():
        if n == name:
            return v
    raise ValueError(f"unknown dtype {name}")


class _TensorTable:
    """A layer's tensors as an acquire's view lists them: their infos in
    pack order, an index by short and by full name, and their dtypes."""

    def __init__(self, view: _c.Layer):
        self.layer = view.name.decode()
        self.infos = [_tensor_info(view.tensors[i]) for i in range(view.n_tensors)]
        self.by_name: Dict[str, int] = {}
        for i, info in enumerate(self.infos):
            self.by_name[info.short_name] = i
        for i, info in enumerate(self.infos):
            self.by_name.setdefault(info.name, i)
        self.dtypes = {k: self.infos[i].dtype for k, i in self.by_name.items()}


class AcquiredLayer(NoCopy):
    """A layer acquired from a :class:`Pager`, until :meth:`release`.

    ``layer["mlp.up_proj.weight"]`` (short or full name) gives the tensor:
    a read-only numpy view on the host backend, a :class:`DeviceTensor` on a
    GPU.  ``layer.dtypes[name]`` is the real dtype ("BF16") of each view,
    ``layer.addresses`` each tensor's address, in pack order (the same
    while the layer stays in the same slot).
    Used as a context manager it is released on exit.  After the release,
    or once the pager is closed, it raises; views taken from it stay
    readable (they keep the pager's memory alive) but hold whatever the
    slot holds by then.
    """

    def __init__(self, pager: "Pager", view: _c.Layer, stream: int):
        self._pager = pager
        self._view = view
        self._stream = stream
        self.index = int(view.index)
        self.released = False
        # What a layer's tensors are never changes: read once a layer (an
        # acquire is on the forward's path); only where they are does.
        table = pager._tables.get(self.index)
        if table is None:
            table = pager._tables[self.index] = _TensorTable(view)
        self.name, self._table = table.layer, table
        tensors = view.tensors
        self.addresses = tuple(tensors[i].data or 0 for i in range(len(table.infos)))
        self._dtypes: Optional[Dict[str, str]] = None

    @property
    def dtypes(self) -> Dict[str, str]:
        """Each view's real dtype by name: this acquire's own copy, made
        when first asked for (not on the acquire's path)."""
        if self._dtypes is None:
            self._dtypes = dict(self._table.dtypes)
        return self._dtypes

    def names(self) -> List[str]:
        """The tensors' short names, in pack order."""
        return [info.short_name for info in self._table.infos]

    def info(self, name: str) -> TensorInfo:
        return self._lookup(name)[0]

    def address(self, name: str) -> int:
        """The tensor's address (device pointer on a GPU)."""
        return self._lookup(name)[1]

    def _lookup(self, name: str):
        if self.released:
            raise WspError(-errno.EINVAL, f"layer {self.name} was released: its views are no longer valid")
        if self._pager.closed:
            raise _closed_error(f"layer {self.name}: its pager {self._pager.path} is closed")
        i = self._table.by_name.get(name)
        if i is None:
            raise KeyError(f"layer {self.name} has no tensor {name!r}; it has: "
                           + ", ".join(self.names()))
        return self._table.infos[i], self.addresses[i]

    def __getitem__(self, name: str):
        info, ptr = self._lookup(name)
        with self._pager._owner.call():
            if not self._pager.on_host:
                return DeviceTensor(ptr, info.dtype, info.shape, info.nbytes,
                                    self._pager._owner.view_owner())
            dt = np.dtype(_view_dtype(info.dtype))
            if info.dtype in _SUB_BYTE:   # packed: bytes, not elements
                shape, count = (info.nbytes,), info.nbytes
            else:
                shape, count = info.shape, info.nbytes // dt.itemsize
            if count == 0 or not ptr:
                a = np.zeros(shape, dtype=dt)
            else:
                buf = self._pager._owner.host_buffer(ptr, info.nbytes)
                a = np.frombuffer(buf, dtype=dt, count=count).reshape(shape)
            a.flags.writeable = False
            return a

    def __contains__(self, name: str) -> bool:
        return name in self._table.by_name

    def release(self, stream: Optional[int] = None) -> None:
        """End this use: the slot is reusable once `stream` (default: the
        acquire's) passes this point.  Views become invalid.  Nothing to do
        once the pager is closed (closing released it)."""
        if self.released:
            return
        s = self._stream if stream is None else _integer("stream", stream, 64)
        self.released = True
        try:
            self._pager._release_view(ctypes.addressof(self._view), s)
        except WspError as e:
            if e.code != -errno.EBADF:   # closed: wsp_close released it
                raise

    def __enter__(self) -> "AcquiredLayer":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


_IO = {"auto": 0, "uring": 1, "pread": 2, "mmap": 3}
_POLICY = {"predict": 0, "lru": 1}
# wsp_acquire_flags: WSP_ACQUIRE_UNPREDICTED | WSP_ACQUIRE_NO_READAHEAD
_ACQUIRE_ROUTED = 1 | 2
OPEN_NO_DIRECT, OPEN_NO_PIN, OPEN_NO_PREFETCH, OPEN_HOST_TOTAL, OPEN_HOST_DECODE = 1, 2, 4, 8, 16
OPEN_GPU_DECODE = 32
# wsp_who_decodes(3)
DECODERS = {1: "gpu", 2: "host", 3: "trying", 4: "mixed"}


class Pager(_Closing):
    """The pager over a pack: layers move disk -> pinned host cache -> GPU.

    Parameters
    ----------
    path : str
        The pack directory.
    device : {"host", "cuda", "cuda:N"}, int, or a list of them
        The third tier: a CUDA device, or host memory ("host").  A list:
        one pager over several devices (wsp_options.devices), each layer on
        one of them - consecutive layers balanced by raw bytes, or as
        `layer_devices` says (per pack layer, an index into the list); each
        device has its own slots and its share of `host_cache`.  Acquire a
        layer with a stream of its device (:meth:`layer_device`).
    host_cache : int or str, optional
        Host tier budget ("8G"); default: a quarter of RAM, at most 8 GiB.
    host_total : bool
        True: `host_cache` bounds all the pager's host memory (cache, read
        staging, decode buffers, host-backend slots), not only the cache
        (WSP_OPEN_HOST_TOTAL).
    host_decode : bool or None
        Who decodes exprans chunks.  None (default): measured while running
        (wsp_open(3)): on a GPU the host tier keeps them packed and the GPU
        decodes them at each fill, then the pager times raw copies decoded
        once on the host against that and keeps the faster
        (:meth:`who_decodes`).  True: always the host (WSP_OPEN_HOST_DECODE:
        layers kept raw).  False: always the GPU (WSP_OPEN_GPU_DECODE).
    gpu_slots : int
        Slots of the largest layer in the third tier (default 3).
    io : {"auto", "uring", "pread", "mmap"}
    policy : {"predict", "lru"}
    lookahead, queue_depth, io_threads, decode_threads, page_bytes : int
        As in wsp_open(3); 0 or None keeps the library's default.
    prefetch, direct, pin : bool
        False sets WSP_OPEN_NO_PREFETCH / NO_DIRECT / NO_PIN.
    on_demand : layer names
        Never read ahead of need (routed experts, task heads): read only
        when acquired or prefetched by name.
    updated_cache : int or str, optional
        Training: host memory for layers :meth:`update` changed (default a
        quarter of `host_cache`); the rest go to an unnamed overflow file.
    state_cache : int or str, optional
        Training: host memory for the state buffers of :meth:`state_acquire`
        (an optimizer's masters and moments; default a quarter of
        `host_cache`); the rest go to an unnamed overflow file.
    overflow_dir : str, optional
        The overflow files' directory (default: the pack's, else $TMPDIR).
    gpu_packed : int or str, optional
        Device memory, besides the slots, that keeps packed layers of an
        exprans pack on the GPU (wsp_options.gpu_packed_bytes): their next
        fills decode there without the link.
    log : callable(str), optional
        Receives notices ("io_uring refused ...").
    trace : callable(stage, layer, begin_ns, end_ns, nbytes), optional
        Receives the pager's timeline (wsp_options.trace): `stage` is
        "read", "decode", "h2d" (a slot fill), "wait" (an acquire blocked)
        or "d2h" (a gradient push's copies); times are
        ``time.monotonic_ns()`` values.  A slot fill's event comes when the
        pager reaps the fill, at a later acquire, :meth:`stats` or
        :meth:`close`, not as the device finishes it.  Called from library
        threads; it must not call this pager (the thread that starts the
        copies calls it too, and would wait for itself).
    """

    def __init__(self, path: Union[str, os.PathLike], *, device: Union[str, int] = "host",
                 host_cache: Optional[SizeLike] = None, gpu_slots: int = 3, io: str = "auto",
                 policy: str = "predict", lookahead: int = 0, queue_depth: Optional[int] = None,
                 io_threads: Optional[int] = None, decode_threads: int = 0,
                 page_bytes: Optional[SizeLike] = None, prefetch: bool = True,
                 direct: bool = True, pin: bool = True, host_total: bool = False,
                 host_decode: Optional[bool] = None,
                 on_demand: Sequence[str] = (), updated_cache: Optional[SizeLike] = None,
                 state_cache: Optional[SizeLike] = None,
                 overflow_dir: Optional[Union[str, os.PathLike]] = None,
                 gpu_packed: Optional[SizeLike] = None,
                 layer_devices: Optional[Sequence[int]] = None,
                 log: Optional[Callable[[str], object]] = None,
                 trace: Optional[Callable[[str, int, int, int, int], object]] = None):
        L = _c.lib()
        o = _c.Options()
        L.wsp_options_init(ctypes.byref(o))
        several = isinstance(device, (list, tuple))
        self.devices = [_device_ordinal(d) for d in (device if several else [device])]
        if not self.devices:
            raise ValueError("device: an empty list")
        self.device = self.devices[0]
        o.device = self.device
        if host_cache is not None:
            o.host_cache_bytes = parse_size(host_cache)
        o.gpu_slots = _integer("gpu_slots", gpu_slots)
        if io not in _IO:
            raise ValueError(f"io must be one of {sorted(_IO)}, not {io!r}")
        if policy not in _POLICY:
            raise ValueError(f"policy must be one of {sorted(_POLICY)}, not {policy!r}")
        o.io, o.policy = _IO[io], _POLICY[policy]
        o.lookahead = _integer("lookahead", lookahead)
        o.decode_threads = _integer("decode_threads", decode_threads)
        if queue_depth:
            o.queue_depth = _integer("queue_depth", queue_depth)
        if io_threads:
            o.io_threads = _integer("io_threads", io_threads)
        if page_bytes is not None:
            o.page_bytes = parse_size(page_bytes)
        self.page_bytes = o.page_bytes   # the host tier's page: a layer takes whole ones
        if updated_cache is not None:
            o.updated_bytes = parse_size(updated_cache)
        if gpu_packed is not None:
            o.gpu_packed_bytes = parse_size(gpu_packed)
        if state_cache is not None:
            o.state_bytes = parse_size(state_cache)
        keep = []   # what the library may use until wsp_close: freed with the handle
        if several:   # read during the open only
            devs = (ctypes.c_int * len(self.devices))(*self.devices)
            o.devices, o.n_devices = ctypes.cast(devs, ctypes.POINTER(ctypes.c_int)), len(devs)
            keep.append(devs)
        if layer_devices is not None:
            with Pack(path) as p:   # the library reads one entry a layer
                if len(layer_devices) != len(p.layers):
                    raise ValueError(f"layer_devices: {len(layer_devices)} entries for "
                                     f"{len(p.layers)} layers")
            where = (ctypes.c_uint32 * max(len(layer_devices), 1))(
                *[_integer("layer_devices", k) for k in layer_devices])
            o.layer_devices = ctypes.cast(where, ctypes.POINTER(ctypes.c_uint32))
            keep.append(where)
        if overflow_dir is not None:
            keep.append(_c_path(overflow_dir))
            o.overflow_dir = keep[-1]
        if host_decode not in (None, True, False):
            raise ValueError(f"host_decode: None, True or False, not {host_decode!r}")
        o.flags = (0 if prefetch else OPEN_NO_PREFETCH) | (0 if direct else OPEN_NO_DIRECT) | \
            (0 if pin else OPEN_NO_PIN) | (OPEN_HOST_TOTAL if host_total else 0) | \
            {None: 0, True: OPEN_HOST_DECODE, False: OPEN_GPU_DECODE}[host_decode]
        # Called from library threads until wsp_close.
        if log:
            keep.append(_c.LOG_FN(lambda _ctx, msg: log(msg.decode(errors="replace"))))
            o.log = keep[-1]
        if trace:
            def on_event(_ctx, ev):
                e = ctypes.cast(ev, ctypes.POINTER(_c.TraceEvent)).contents
                name = _c.STAGES[e.stage] if 0 <= e.stage < len(_c.STAGES) else str(e.stage)
                trace(name, e.layer, e.begin_ns, e.end_ns, e.bytes)
            keep.append(_c.TRACE_FN(on_event))
            o.trace = keep[-1]
        if on_demand:
            names = [_c_name(n, "on_demand") for n in on_demand] + [None]
            demand = (ctypes.c_char_p * len(names))(*names)   # read during the open only
            o.on_demand = ctypes.cast(demand, ctypes.POINTER(ctypes.c_char_p))
        cpath = _c_path(path)
        self.path = os.fsdecode(cpath)
        h = ctypes.c_void_p()
        buf = ctypes.create_string_buffer(1024)
        rc = L.wsp_open(cpath, ctypes.byref(o), ctypes.byref(h), buf, len(buf))
        _check(rc, lambda: buf.value.decode(errors="replace"))
        close = L.wsp_close
        self._owner = Handle(h.value, lambda ptr, keep=keep: close(ptr), f"pager {self.path}",
                             _closed_error)
        self._ptr = h.value
        self.pack = Pack(self.path, _borrowed=(self._owner, L.wsp_pager_pack(self._ptr)))
        self.on_host = all(d == _c.DEVICE_HOST for d in self.devices)
        self._tables: Dict[int, _TensorTable] = {}   # per layer, for AcquiredLayer
        # (layer, tensor) -> (accumulator's address, its view): handed out
        # again while the accumulator stays (a trainer asks every backward)
        self._grad_views: Dict[Tuple[int, int], Tuple[int, np.ndarray]] = {}

    @property
    def closed(self) -> bool:
        return self._owner.closed

    def _errmsg(self) -> str:
        return _c.lib().wsp_errmsg(self._ptr).decode(errors="replace")

    def _call(self, fn, *args) -> int:
        """`fn(pager, *args)` as one counted call; a negative return raises."""
        with self._owner.call() as h:
            return _check(fn(h, *args), self._errmsg)

    def _index(self, layer: Union[int, str]) -> int:
        """A layer index from an index or a name; anything else raises
        TypeError.  An index the library's uint32_t cannot hold raises
        WspError (WSP_ENOTFOUND) here, as the library would for any index
        out of range: ctypes would wrap 2**32 to layer 0."""
        if type(layer) is int and 0 <= layer < 1 << 32:
            return layer   # the common case first: every layer visit passes one
        if isinstance(layer, str):
            return self.pack.layer(layer).index
        if isinstance(layer, bool):
            raise TypeError("layer must be an index or a name, not bool")
        try:
            i = operator.index(layer)
        except TypeError:
            raise TypeError(f"layer must be an index or a name, not {type(layer).__name__}") \
                from None
        if not 0 <= i < 1 << 32:
            self._layer_info(i)
        return i

    def _layer_info(self, i: int) -> LayerInfo:
        """pack.layers[i], or WspError (WSP_ENOTFOUND) as the library says it."""
        if not 0 <= i < len(self.pack.layers):
            raise WspError(WSP_ENOTFOUND, f"{self.path}: no layer {i} (the pack has "
                                          f"{len(self.pack.layers)})")
        return self.pack.layers[i]

    def _tensor_count(self, idx: int, given: int, what: str) -> int:
        L = self._layer_info(idx)
        if given != len(L.tensors):
            raise ValueError(f"layer {L.name} has {len(L.tensors)} tensors, {given} {what} given")
        return given

    def acquire(self, layer: Union[int, str], stream: Optional[int] = None,
                timeout: Optional[float] = None, routed: bool = False) -> AcquiredLayer:
        """Make `layer` (index or name) usable on `stream` (a cudaStream_t as
        an int; None: the legacy default stream).  The stream waits for the
        copy; the host blocks only for a layer not yet in the host tier.
        With `timeout` (seconds), when every slot holds an acquired layer,
        wait up to that long for a release (wsp_acquire_wait) instead of
        failing at once.  `routed`: its place in the order depends on data
        (a routed expert, hinted with :meth:`hint_next`): the predictor does
        not learn from it and it starts no read-ahead (wsp_acquire_flags)."""
        L = _c.lib()
        idx = self._index(layer)
        s = 0 if stream is None else _integer("stream", stream, 64)
        view = ctypes.POINTER(_c.Layer)()
        if routed and timeout is not None:
            raise ValueError("acquire: routed and timeout cannot be combined")
        if timeout is not None:
            ns = float(timeout) * 1e9
            if not 0 <= ns < 2 ** 63:
                raise ValueError(f"timeout {timeout!r} must be a number of seconds >= 0")
        # The layer's view is read inside the call: once it returns, a
        # close() in another thread may free the pager.
        with self._owner.call() as h:
            if routed:
                rc = L.wsp_acquire_flags(h, idx, ctypes.c_void_p(s), _ACQUIRE_ROUTED,
                                         ctypes.byref(view))
            elif timeout is None:
                rc = L.wsp_acquire(h, idx, ctypes.c_void_p(s), ctypes.byref(view))
            else:
                rc = L.wsp_acquire_wait(h, idx, ctypes.c_void_p(s), ctypes.byref(view), int(ns))
            _check(rc, self._errmsg)
            return AcquiredLayer(self, view.contents, s)

    def _release_view(self, view: int, stream: int) -> None:
        # This acquire's own use (wsp_release_view), never another
        # holder's of the same layer; still while close() waits for the
        # calls in flight, which may be waiting for this slot.
        with self._owner.call(release=True) as h:
            _check(_c.lib().wsp_release_view(h, ctypes.c_void_p(view), ctypes.c_void_p(stream)),
                   self._errmsg)

    def layer_device(self, layer: Union[int, str]) -> Tuple[int, int]:
        """The device `layer` is on (wsp_layer_device(3)): its CUDA ordinal
        (or -1, the host backend) and its position in the pager's devices."""
        dev, at = ctypes.c_int(), ctypes.c_uint()
        self._call(_c.lib().wsp_layer_device, self._index(layer), ctypes.byref(dev),
                   ctypes.byref(at))
        return dev.value, at.value

    def prefetch(self, layer: Union[int, str]) -> None:
        """Hint that `layer` is needed soon; never blocks."""
        self._call(_c.lib().wsp_prefetch, self._index(layer))

    def provide(self, layer: Union[int, str], stored) -> bool:
        """Hand the pager `layer`'s stored bytes, got elsewhere (other
        processes read parts of them: wsp_provide(3)): a buffer of exactly
        the layer's ``stored_bytes`` (bytes, a NumPy array, a contiguous CPU
        tensor).  Copied; the layer's next load uses them instead of the
        disk, and starts now.  True when taken, False when the layer was
        present or loading already."""
        ptr, n = _host_bytes(stored, "provide")
        return self._call(_c.lib().wsp_provide, self._index(layer), ctypes.c_void_p(ptr),
                          n) == 1

    def provide_device(self, layer: Union[int, str], packed, stream=None) -> Optional[bool]:
        """As :meth:`provide`, with the layer's packed form (what the parts
        of :meth:`Pack.read_part` make together) in device memory: a
        contiguous CUDA tensor of exactly its size, there once `stream` (a
        ``torch.cuda.Stream``; default: the current one) reaches its current
        point (wsp_provide_device(3)).  The layer is decoded from it into a
        slot, and `stream` waits for that decode, so the tensor may be freed
        in its order.  True when taken, False when not needed (in a slot
        already, every slot in use, or updated by training), None when this
        pager decodes nothing on its device (use :meth:`provide`).  With
        `packed` None it only answers: True or None."""
        lib = _c.lib()
        if packed is None:
            with self._owner.call() as h:
                rc = lib.wsp_provide_device(h, self._index(layer), None, 0, None)
                return None if rc == -errno.ENOTSUP else _check(rc, self._errmsg) == 1
        import torch
        if not (isinstance(packed, torch.Tensor) and packed.is_cuda and packed.is_contiguous()):
            raise ValueError("provide_device: a contiguous CUDA tensor is needed")
        # The decode reads it on the layer's device: memory of another GPU
        # would be an illegal address there, which breaks the CUDA context.
        want = self.devices[0] if len(self.devices) == 1 else self.layer_device(layer)[0]
        if packed.device.index != want:
            raise ValueError(f"provide_device: the tensor is on cuda:{packed.device.index}, "
                             f"the layer's pager on cuda:{want}")
        if stream is None:
            stream = torch.cuda.current_stream(packed.device)
        elif stream.device != packed.device:
            raise ValueError(f"provide_device: the stream is on {stream.device}, the tensor "
                             f"on {packed.device}")
        n = packed.numel() * packed.element_size()
        with self._owner.call() as h:
            rc = lib.wsp_provide_device(h, self._index(layer), ctypes.c_void_p(packed.data_ptr()),
                                        n, ctypes.c_void_p(stream.cuda_stream))
            return None if rc == -errno.ENOTSUP else _check(rc, self._errmsg) == 1

    def hint_next(self, layers: Sequence[Union[int, str]]) -> None:
        """The next acquires will be `layers`, in that order (a router's
        choice of experts): each moves up the tiers now (wsp_hint_next).
        Never blocks."""
        idx = [self._index(x) for x in layers]
        arr = (ctypes.c_uint32 * max(len(idx), 1))(*idx)
        self._call(_c.lib().wsp_hint_next, arr, len(idx))

    def reset_prediction(self) -> None:
        """Forget the learned execution order, and measure who decodes again
        (wsp_reset_prediction(3))."""
        with self._owner.call() as h:
            _c.lib().wsp_reset_prediction(h)

    def stats(self) -> Dict[str, Union[int, str]]:
        """The counters of wsp_get_stats(3), as a dict.  On the host backend
        ("host"/"cpu") the third tier is host memory: ``gpu_hits`` then
        counts acquires served by a filled host slot and ``bytes_h2d`` the
        bytes copied into slots (see wsp_get_stats(3))."""
        st = _c.Stats()
        self._call(_c.lib().wsp_get_stats, ctypes.byref(st))
        out = {name: getattr(st, name) for name, _ in _c.Stats._fields_ if name != "reserved"}
        out["io_backend"] = st.io_backend.decode()
        return out

    def reset_stats(self) -> None:
        with self._owner.call() as h:
            _c.lib().wsp_reset_stats(h)

    def who_decodes(self) -> str:
        """Who decodes packed layers now (wsp_who_decodes(3)): "gpu", "host",
        "trying" (being measured) or "mixed" (devices that chose apart)."""
        with self._owner.call() as h:
            return DECODERS[_check(_c.lib().wsp_who_decodes(h), lambda: "wsp_who_decodes")]

    # Gradients written back (wsp_grad_push(3)).
    def _layer_or_all(self, layer: Optional[Union[int, str]]) -> int:
        return _c.ALL_LAYERS if layer is None else self._index(layer)

    def grad_push(self, layer: Union[int, str], grads: Sequence[Optional[int]],
                  stream: Optional[int] = None) -> None:
        """Hand the pager `layer`'s gradients: one address per tensor of the
        layer, in its order (device memory, or host memory on the host
        backend; contiguous, the tensor's dtype), or None.  The copies run
        after the work enqueued on `stream` so far and add into fp32
        accumulators; the memory must stay valid until :meth:`grad_done`."""
        idx = self._index(layer)
        n = self._tensor_count(idx, len(grads), "gradients")
        arr = (ctypes.c_void_p * max(n, 1))(*[g or None for g in grads])
        s = 0 if stream is None else _integer("stream", stream, 64)
        self._call(_c.lib().wsp_grad_push, idx, arr, ctypes.c_void_p(s))

    def _tensor_index(self, layer: int, tensor: Union[int, str]) -> int:
        if isinstance(tensor, str):
            ts = self._layer_info(layer).tensors
            found = [i for i, t in enumerate(ts) if tensor in (t.name, t.short_name)]
            if not found:
                raise KeyError(f"layer {self._layer_info(layer).name} has no tensor {tensor!r}")
            return found[0]
        return _integer("tensor", tensor)

    def grad_push_f32(self, layer: Union[int, str], tensor: Union[int, str], grad: int,
                      stream: Optional[int] = None) -> None:
        """Hand the pager one tensor's whole gradient as fp32, whatever the
        tensor's dtype (wsp_grad_push_f32(3)): `grad` the address of its
        elements as float32 (device memory, or host memory on the host
        backend), valid until :meth:`grad_done`.  A first push since
        zeroing is copied straight into the accumulator, with no widening
        on the host; it costs twice a bf16 gradient's bytes on the link."""
        idx = self._index(layer)
        s = 0 if stream is None else _integer("stream", stream, 64)
        self._call(_c.lib().wsp_grad_push_f32, idx, self._tensor_index(idx, tensor),
                   ctypes.c_void_p(_integer("grad", grad, 64)), ctypes.c_void_p(s))

    def grad_push_rows(self, layer: Union[int, str], tensor: Union[int, str], rows: int,
                       n_rows: int, values: int, stream: Optional[int] = None) -> None:
        """Hand the pager a gradient of one tensor that is zero outside some
        rows, as those rows (wsp_grad_push_rows(3)): `rows` the address of
        n_rows int64 row indices (negative: padding, skipped), `values` of
        n_rows rows of the tensor's dtype, both device memory (host memory
        on the host backend), valid until :meth:`grad_done`.  `tensor` is
        its index in the layer or its name."""
        idx = self._index(layer)
        s = 0 if stream is None else _integer("stream", stream, 64)
        self._call(_c.lib().wsp_grad_push_rows, idx, self._tensor_index(idx, tensor),
                   ctypes.c_void_p(_integer("rows", rows, 64)), _integer("n_rows", n_rows, 64),
                   ctypes.c_void_p(_integer("values", values, 64)), ctypes.c_void_p(s))

    def grad_done(self, layer: Optional[Union[int, str]] = None) -> bool:
        """Whether every push of `layer` (None: of all layers) is accumulated."""
        return self._call(_c.lib().wsp_grad_query, self._layer_or_all(layer)) == 1

    def grad_wait(self, layer: Optional[Union[int, str]] = None) -> None:
        """Block until every push of `layer` (None: of all layers) is accumulated."""
        self._call(_c.lib().wsp_grad_wait, self._layer_or_all(layer))

    def grads(self, layer: Union[int, str]) -> Tuple[Dict[str, Optional[np.ndarray]], int]:
        """The layer's fp32 gradient accumulators, by tensor name (writable
        numpy views of the pager's memory, which they keep alive; None for
        a tensor never given a gradient), and the number of pushes they
        hold.  An accumulator that stayed where it was comes as the same
        array as in the last call."""
        idx = self._index(layer)
        g = _c.Grads()
        out: Dict[str, Optional[np.ndarray]] = {}
        with self._owner.call() as h:
            _check(_c.lib().wsp_grad_get(h, idx, ctypes.byref(g)), self._errmsg)
            for i, t in enumerate(self._layer_info(idx).tensors):
                p = ctypes.cast(g.data[i], ctypes.c_void_p).value
                if not p:
                    out[t.name] = None
                    continue
                known = self._grad_views.get((idx, i))
                if known is not None and known[0] == p:
                    out[t.name] = known[1]
                    continue
                n = int(np.prod(t.shape, dtype=np.int64)) if t.shape else 1
                buf = self._owner.host_buffer(p, 4 * n) if n else bytearray()
                out[t.name] = np.frombuffer(buf, dtype=np.float32, count=n).reshape(t.shape)
                self._grad_views[(idx, i)] = (p, out[t.name])
        return out, int(g.pushes)

    def grad_zero(self, layer: Optional[Union[int, str]] = None) -> None:
        """Zero the accumulators of `layer` (None: all) once their pushes are in."""
        self._call(_c.lib().wsp_grad_zero, self._layer_or_all(layer))

    # Training state kept for the caller (wsp_state_acquire(3)).
    def state_acquire(self, layer: Union[int, str], nbytes: int) -> int:
        """Take `layer`'s state buffer of `nbytes` bytes: its host address
        (page-locked on a GPU), holding what it held when last released,
        or zeros (none of that size yet).  Read and write it until
        :meth:`state_release`."""
        p = ctypes.c_void_p()
        self._call(_c.lib().wsp_state_acquire, self._index(layer),
                   _integer("nbytes", nbytes, 63), ctypes.byref(p))
        return int(p.value)

    def state_release(self, layer: Union[int, str], changed: bool) -> None:
        """Hand `layer`'s state buffer back (`changed`: it was written)."""
        self._call(_c.lib().wsp_state_release, self._index(layer), int(bool(changed)))

    def state_size(self, layer: Union[int, str]) -> int:
        """Bytes of `layer`'s state buffer (0: none)."""
        return int(self._call(_c.lib().wsp_state_size, self._index(layer)))

    def update(self, layer: Union[int, str], values: Sequence[Optional[int]]) -> None:
        """New values for `layer` (wsp_update(3)): one host address per tensor
        of the layer, in its order (the tensor's dtype and size), or None to
        keep it.  Every later acquire sees them; the layer must not be held."""
        idx = self._index(layer)
        n = self._tensor_count(idx, len(values), "values")
        arr = (ctypes.c_void_p * max(n, 1))(*[v or None for v in values])
        self._call(_c.lib().wsp_update, idx, arr)

    def update_f32(self, layer: Union[int, str], values: Sequence[Optional[int]]) -> None:
        """As :meth:`update`, each address holding the tensor's elements as
        fp32 (wsp_update_f32(3)): narrowed to the tensor's dtype in the copy
        (F32 and BF16 tensors), so that fp32 masters need no conversion of
        their own."""
        idx = self._index(layer)
        n = self._tensor_count(idx, len(values), "values")
        arr = (ctypes.c_void_p * max(n, 1))(*[v or None for v in values])
        self._call(_c.lib().wsp_update_f32, idx, arr)

    def save(self, out: PathLike, *, force: bool = False, progress=None) -> None:
        """Write a new pack at `out` from the current layers, updated or not
        (wsp_save(3)): atomic; ``wspack unpack`` of it gives safetensors."""
        cb = _progress_fn(progress)
        self._call(_c.lib().wsp_save, _c_path(out), 1 if force else 0, cb, None)

    def _host_buffer(self, address: int, nbytes: int):
        """Pager memory (a host slot, a state buffer) as a writable ctypes
        byte array that keeps the pager alive (numpy.frombuffer and
        torch.frombuffer of it do too): for wspager.torch's views."""
        with self._owner.call():
            return self._owner.host_buffer(_integer("address", address, 64),
                                           _integer("nbytes", nbytes, 63))

    def _view_owner(self) -> object:
        """An object that keeps the pager alive, for a view of device memory."""
        with self._owner.call():
            return self._owner.view_owner()

    def close(self) -> None:
        """Stop the pager: later calls raise; calls in flight in other
        threads finish first.  Views of acquired layers become invalid.
        Its memory is freed now, or, while numpy arrays, torch tensors or
        DeviceTensors over it are still alive, when the last of them goes
        (so that none of them ever reads freed memory)."""
        self._grad_views.clear()
        self._owner.close()


def _device_ordinal(device: Union[str, int]) -> int:
    if isinstance(device, int):
        return device
    d = str(device)
    if d in ("host", "cpu"):
        return _c.DEVICE_HOST
    if d == "cuda":
        return 0
    if d.startswith("cuda:") and d[5:].isdigit():
        return int(d[5:])
    raise ValueError(f"device must be 'host', 'cpu', 'cuda', 'cuda:N' or an ordinal, not {device!r}")


_CODECS = {"zstd": 0, "raw": 1, "exprans": 2, "auto": 3}


def convert(inputs: Union[PathLike, Sequence[PathLike]],
            out: PathLike, *, level: int = 1,
            chunk_size: Optional[SizeLike] = None, shard_size: Optional[SizeLike] = None,
            codec: Optional[str] = None, transform: bool = True, threads: int = 0,
            group: Optional[str] = None,
            groups: Optional[Union[Dict[str, str], Sequence[Tuple[str, str]]]] = None,
            order: Optional[Sequence[str]] = None, force: bool = False,
            smallest: bool = False,
            progress: Optional[Callable[[int, int], object]] = None,
            log: Optional[Callable[[str], object]] = None) -> Pack:
    """Convert safetensors checkpoints into the pack `out`, and open it.

    `inputs` is a checkpoint directory (with model.safetensors.index.json or
    one model.safetensors) or .safetensors files.  `group` is a regex whose
    first capture names a tensor's layer; `groups` maps tensor names to
    layers explicitly (a dict or (tensor, layer) pairs; the layers it names
    come first in the pack, in their order here).  `order`: layer names
    (after grouping) that come first, in this order, before those of
    `groups`.  `progress(done, total)`
    is called with raw bytes (a true return value cancels); `log(message)`
    receives notes about the inputs (orphan tensors, stray files).
    `codec`: "auto" (per chunk: exprans unless zstd is more than 3%
    smaller), "exprans" (float exponents rANS-coded, decoded by the GPU;
    other dtypes zstd), "zstd" or "raw"; None, the library's default
    (auto, see wspack(1)).  `smallest`: exprans chunks also code each
    value's top mantissa bit with its exponent where smaller (about 0.5%;
    their GPU decode is slower; WSP_CONVERT_SMALLEST).
    """
    if isinstance(inputs, (str, bytes, os.PathLike)):
        inputs = [inputs]
    paths = [_c_path(p) for p in inputs]
    cout = _c_path(out)
    L = _c.lib()
    o = _c.ConvertOptions()
    L.wsp_convert_options_init(ctypes.byref(o))
    if isinstance(level, bool) or not isinstance(level, int) or not -(1 << 17) <= level <= 22:
        raise ValueError(f"level must be a zstd level (an integer up to 22), not {level!r}")
    o.level = level
    if chunk_size is not None:
        o.chunk_bytes = parse_size(chunk_size)
    if shard_size is not None:
        o.shard_bytes = parse_size(shard_size)
    if codec is not None:
        if codec not in _CODECS:
            raise ValueError(f"codec must be one of {sorted(_CODECS)}, not {codec!r}")
        o.codec = _CODECS[codec]
    o.transform = 1 if transform else 0
    o.threads = _integer("threads", threads)
    group_b = _c_name(group, "group") if group else None
    o.group_regex = group_b
    o.flags = (1 if force else 0) | (2 if smallest else 0)   # WSP_CONVERT_FORCE, _SMALLEST
    if groups is not None:
        pairs = list(groups.items()) if isinstance(groups, dict) else list(groups)
        flat = [_c_name(s, "groups") for pair in pairs for s in pair] + [None]
        group_map = (ctypes.c_char_p * len(flat))(*flat)   # alive until the call returns
        o.group_map = ctypes.cast(group_map, ctypes.POINTER(ctypes.c_char_p))
    if order is not None:
        names = [_c_name(s, "order") for s in order] + [None]
        layer_order = (ctypes.c_char_p * len(names))(*names)   # alive until the call returns
        o.layer_order = ctypes.cast(layer_order, ctypes.POINTER(ctypes.c_char_p))
    pcb = _progress_fn(progress)
    lcb = _c.LOG_FN(lambda _ctx, msg: log(msg.decode(errors="replace"))) if log else _c.LOG_FN()
    o.progress, o.log = pcb, lcb
    arr = (ctypes.c_char_p * len(paths))(*paths)
    buf = ctypes.create_string_buffer(1024)
    rc = L.wsp_convert(arr, len(paths), cout, ctypes.byref(o), buf, len(buf))
    _check(rc, lambda: buf.value.decode(errors="replace"))
    return Pack(cout)
