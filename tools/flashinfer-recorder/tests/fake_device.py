"""A host-memory stand-in for runner/device.Driver, for the CPU tests: it keeps every buffer
in a dict and "runs" a call by writing a deterministic non-poison pattern into `out` and
leaving the state alone, so the recorder's plumbing, the write-pattern checks and the manifest
writer can be exercised without a GPU. Its outputs are not FlashInfer's."""

import hashlib


class FakeDriver:
    def __init__(self, reject=(), cuda_error=(), lose_context=()):
        self.mem = {}
        self.next = 1
        self.reject = set(reject)
        self.cuda_error = set(cuda_error)
        # Algorithms whose call leaves the context unusable (every later allocation fails).
        self.lose_context = set(lose_context)
        self.lost = False
        self.calls = []

    def info(self):
        return {"gpu": "fake", "sms": 132, "cc": "9.0", "l2_bytes": 0, "cuda_driver_api": 0, "cuda_runtime": 0}

    def l2_bytes(self):
        return self.info()["l2_bytes"]

    def alloc(self, nbytes):
        if self.lost:
            raise RuntimeError("cudaMalloc: an illegal memory access was encountered (fake)")
        p = self.next << 32
        self.next += 1
        self.mem[p] = bytearray(nbytes)
        return p

    def free(self, ptr):
        del self.mem[ptr]

    # A pointer is its allocation's key (the high 32 bits) plus a byte offset (the low ones).
    def _at(self, ptr):
        return self.mem[ptr & ~0xFFFFFFFF], ptr & 0xFFFFFFFF

    def upload(self, ptr, data):
        m, o = self._at(ptr)
        m[o: o + len(data)] = data

    def download(self, ptr, nbytes):
        m, o = self._at(ptr)
        return bytes(m[o: o + nbytes])

    def fill(self, ptr, byte, nbytes):
        m, o = self._at(ptr)
        m[o: o + nbytes] = bytes([byte]) * nbytes

    def entry(self, symbol):
        return symbol

    def time(self, entry, args, warmup=3, iters=20):
        for _ in range(warmup + iters):
            st, msg = self.call(entry, args)
            if st:
                raise RuntimeError(msg)
        return 1.0

    def time_queued(self, entry, args, warmup=3, iters=20, copies=1, state_stride=0):
        self.queued_copies = copies
        self.time(entry, args, warmup, iters)
        return 0.5 if copies == 1 else 0.75

    def philox4x(self, rounds, seed, offset):
        return ["00000000"] * 4  # not FlashInfer's values: verify counts them as a mismatch

    def cvt_rs_f16(self, x_bits, rand13):
        return "0000"

    def call(self, entry, args):
        self.calls.append((entry, args.algorithm))
        if args.algorithm in self.lose_context:
            self.lost = True
            return 2, "an illegal memory access was encountered (fake)"
        if args.algorithm in self.reject:
            return 1, "fake launcher: algorithm not supported"
        if args.algorithm in self.cuda_error:
            return 2, "fake launcher: an illegal memory access was encountered"
        out = self.mem[args.out]
        seed = hashlib.sha256(bytes(self.mem[args.x][:64]) + bytes([args.algorithm])).digest()
        pat = bytes(b & 0x7F for b in seed)  # never an all-ones element
        reps = len(out) // len(pat) + 1
        out[:] = (pat * reps)[: len(out)]
        return 0, ""
