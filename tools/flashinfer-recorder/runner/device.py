"""ctypes binding of libfirec.so (driver/firec.h): device memory, and the group entry points from
lib/groups/<group>.so."""

import ctypes
import os

_I64 = ctypes.c_int64
_PTR_FIELDS = [
    "state", "x", "dt", "dt_bias", "A", "B", "C", "D", "z", "out",
    "state_batch_indices", "dst_state_batch_indices", "state_scale", "rand_seed",
    "intermediate_states", "intermediate_state_indices", "intermediate_state_scales",
    "cu_seqlens", "num_accepted_tokens",
]
_I64_FIELDS = [
    "batch", "nheads", "dim", "dstate", "ngroups", "state_cache_size", "pad_slot_id",
    "ntokens_mtp", "cache_steps",
    "x_stride_batch", "dt_stride_batch", "B_stride_batch", "C_stride_batch", "out_stride_batch",
    "z_stride_batch", "state_stride_batch", "state_scale_stride_batch",
    "x_stride_mtp", "dt_stride_mtp", "B_stride_mtp", "C_stride_mtp", "out_stride_mtp", "z_stride_mtp",
    "sbi_stride_batch", "sbi_stride_T", "dsbi_stride_batch", "dsbi_stride_T",
    "inter_stride_batch", "inter_scales_stride_batch",
]


class FirecArgs(ctypes.Structure):
    _fields_ = (
        [(n, _I64) for n in _I64_FIELDS]
        + [(n, ctypes.c_int32) for n in ("dt_softplus", "disable_state_update", "algorithm", "no_sync")]
        + [(n, ctypes.c_void_p) for n in _PTR_FIELDS]
    )


ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(FirecArgs), ctypes.c_char_p, ctypes.c_int)


class DeviceError(RuntimeError):
    pass


class Driver:
    def __init__(self, lib_path):
        self.lib = ctypes.CDLL(os.path.abspath(lib_path))
        self._lib_dir = os.path.dirname(os.path.abspath(lib_path))
        self._groups = {}
        if self.lib.firec_abi_version() != 1:
            raise DeviceError("libfirec ABI version mismatch")
        if self.lib.firec_sizeof_args() != ctypes.sizeof(FirecArgs):
            raise DeviceError("firec_args layout differs between the library and runner/device.py")
        self._err = ctypes.create_string_buffer(4096)
        for name in ("firec_malloc",):
            getattr(self.lib, name).argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int]
        for name in ("firec_h2d", "firec_d2h"):
            getattr(self.lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int]
        self.lib.firec_memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int]
        self.lib.firec_free.argtypes = [ctypes.c_void_p]
        self.lib.firec_time.argtypes = [ctypes.c_void_p, ctypes.POINTER(FirecArgs), ctypes.c_int, ctypes.c_int,
                                        ctypes.POINTER(ctypes.c_double), ctypes.c_char_p, ctypes.c_int]
        self.lib.firec_time_queued.argtypes = [ctypes.c_void_p, ctypes.POINTER(FirecArgs), ctypes.c_int, ctypes.c_int,
                                               ctypes.c_int64, ctypes.POINTER(ctypes.c_double),
                                               ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double),
                                               ctypes.c_char_p, ctypes.c_int]
        if not hasattr(self.lib, "firec_time_queued_rotating"):
            raise DeviceError(f"{lib_path} predates firec_time_queued_rotating: rebuild it (build.py)")
        self.lib.firec_time_queued_rotating.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(FirecArgs), ctypes.c_int, ctypes.c_int64, ctypes.c_int, ctypes.c_int,
            ctypes.c_int64, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double),
            ctypes.POINTER(ctypes.c_double), ctypes.c_char_p, ctypes.c_int]
        self.lib.firec_philox4x.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_uint32),
                                            ctypes.c_char_p, ctypes.c_int]
        self.lib.firec_cvt_rs_f16.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint16),
                                              ctypes.c_char_p, ctypes.c_int]

    def _check(self, st, what):
        if st != 0:
            raise DeviceError(f"{what}: {self._err.value.decode(errors='replace')}")

    def info(self):
        sms, ma, mi, drv, rt = (ctypes.c_int() for _ in range(5))
        l2 = ctypes.c_int64()
        name = ctypes.create_string_buffer(256)
        st = self.lib.firec_device_info(ctypes.byref(sms), ctypes.byref(ma), ctypes.byref(mi), ctypes.byref(l2), name, 256,
                                        ctypes.byref(drv), ctypes.byref(rt))
        if st != 0:
            raise DeviceError("no CUDA device")
        return {"gpu": name.value.decode(), "sms": sms.value, "cc": f"{ma.value}.{mi.value}", "l2_bytes": l2.value,
                "cuda_driver_api": drv.value, "cuda_runtime": rt.value}

    def l2_bytes(self):
        """The device's L2 size in bytes (from info(), read once)."""
        if not hasattr(self, "_l2"):
            self._l2 = self.info()["l2_bytes"]
        return self._l2

    def alloc(self, nbytes):
        p = ctypes.c_void_p()
        self._check(self.lib.firec_malloc(ctypes.byref(p), nbytes, self._err, 4096), "cudaMalloc")
        return p.value

    def free(self, ptr):
        self.lib.firec_free(ptr)

    def upload(self, ptr, data):
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        self._check(self.lib.firec_h2d(ptr, buf, len(data), self._err, 4096), "upload")

    def download(self, ptr, nbytes):
        buf = ctypes.create_string_buffer(nbytes)
        self._check(self.lib.firec_d2h(buf, ptr, nbytes, self._err, 4096), "download")
        return buf.raw

    def fill(self, ptr, byte, nbytes):
        self._check(self.lib.firec_memset(ptr, byte, nbytes, self._err, 4096), "memset")

    def entry(self, symbol):
        """The entry point `symbol` (`firec_<group>`) from its group's library, lib/groups/<group>.so
        beside libfirec.so, loaded once with RTLD_LOCAL: groups of the same types define
        FlashInfer's launchers under the same names with different head dims and round counts
        (build.py links each alone)."""
        gid = symbol[len("firec_"):] if symbol.startswith("firec_") else symbol
        lib = self._groups.get(gid)
        if lib is None:
            path = os.path.join(self._lib_dir, "groups", gid + ".so")
            if not os.path.exists(path):
                raise DeviceError(f"{path} is missing: rebuild with the spec that has this case")
            lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
            self._groups[gid] = lib
        try:
            fn = getattr(lib, symbol)
        except AttributeError:
            raise DeviceError(f"{symbol} is not in {gid}.so: rebuild with the spec that has this case") from None
        return ENTRY(ctypes.cast(fn, ctypes.c_void_p).value)

    def call(self, entry, args):
        """Runs one call; returns (status, message): 0 ok, 1 rejected by FlashInfer, 2 CUDA error."""
        st = entry(ctypes.byref(args), self._err, 4096)
        msg = self._err.value.decode(errors="replace") if st else ""
        if st == 1 and "CUDA Error" in msg:
            st = 2  # FlashInfer's launcher raised on a CUDA call, not on an argument check
        return st, msg

    def time(self, entry, args, warmup=3, iters=20):
        us = ctypes.c_double()
        fp = ctypes.cast(entry, ctypes.c_void_p)
        self._check(self.lib.firec_time(fp, ctypes.byref(args), warmup, iters, ctypes.byref(us), self._err, 4096), "timing")
        return us.value

    def time_queued(self, entry, args, warmup=3, iters=20, copies=1, state_stride=0):
        """The calls timed behind a spin kernel (firec_time_queued): what the GPU takes per call
        without the host's per-call cost. The spin doubles until the host finishes enqueueing
        before it ends. With `copies` > 1 call k takes the state `state_stride` bytes * (k mod
        copies) past args.state (firec_time_queued_rotating: the state from HBM). Returns µs per
        call."""
        us, spin, host = ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
        fp = ctypes.cast(entry, ctypes.c_void_p)
        cycles = 1 << 21
        for _ in range(8):
            self._check(self.lib.firec_time_queued_rotating(
                fp, ctypes.byref(args), copies, ctypes.c_int64(state_stride), warmup, iters,
                ctypes.c_int64(cycles), ctypes.byref(us), ctypes.byref(spin), ctypes.byref(host),
                self._err, 4096), "queued timing")
            if host.value < spin.value:
                return us.value
            cycles *= 2
        raise DeviceError(f"queued timing: the host took {host.value:.0f} µs to enqueue, the spin {spin.value:.0f} µs")

    def philox4x(self, rounds, seed, offset):
        out = (ctypes.c_uint32 * 4)()
        self._check(self.lib.firec_philox4x(rounds, seed, offset, out, self._err, 4096), "philox")
        return [f"{v:08x}" for v in out]

    def cvt_rs_f16(self, x_bits, rand13):
        out = ctypes.c_uint16()
        self._check(self.lib.firec_cvt_rs_f16(x_bits, rand13, ctypes.byref(out), self._err, 4096), "cvt_rs")
        return f"{out.value:04x}"
