#!/usr/bin/env python3
"""Board energy per call of `ssu_bench --soak` phases (run on the GPU host).

Usage: energy_soak.py [--label NAME] -- ssu_bench ARGS... --soak SECS
  where ssu_bench is the binary `cargo bench --no-run --bench ssu_bench` builds (source
  benches/ssu_bench.rs; copied to the GPU host) or `cargo bench --bench ssu_bench --`.

Runs the command, echoes its output, and samples the GPU through NVML (pynvml, from the
nvidia-ml-py package) every ~2 ms in a thread: the board's energy counter, power, SM clock and
the clock-event reasons. For every steady soak phase (between the `SOAK_STEADY` and `SOAK_END`
lines that `ssu_bench --soak` prints, the stream idle at both) it prints one line:

  ENERGY <label> us_per_call=... power_W=... mJ_per_call=... sm_MHz=... cap=...% hw=...%

power_W is the slope of a least-squares line through the energy counter's updates inside the
phase; mJ_per_call = power_W * us_per_call / 1000. Under the board's power limit the time per
call is energy per call divided by that limit, so mJ_per_call ranks variants for a power-capped
GPU even when measured on one below its limit. cap is the share of samples with the SW power
cap event active, hw any hardware slowdown (thermal, power brake). GPU 0 only.
"""

import subprocess
import sys
import threading
import time

import pynvml

SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8 | 0x40 | 0x80  # HW slowdown, HW thermal, HW power brake
SW_THERMAL = 0x20


def main():
    args = sys.argv[1:]
    label = "run"
    if args[:1] == ["--label"]:
        label, args = args[1], args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.exit(__doc__)

    pynvml.nvmlInit()
    dev = pynvml.nvmlDeviceGetHandleByIndex(0)
    reasons_fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons"
    )
    samples = []  # (t, energy mJ, power mW, sm MHz, reasons)
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            t = time.monotonic()
            e = pynvml.nvmlDeviceGetTotalEnergyConsumption(dev)
            p = pynvml.nvmlDeviceGetPowerUsage(dev)
            c = pynvml.nvmlDeviceGetClockInfo(dev, pynvml.NVML_CLOCK_SM)
            r = reasons_fn(dev)
            samples.append((t, e, p, c, r))
            time.sleep(0.002)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, bufsize=1)
    t0 = None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if line.startswith("SOAK_STEADY"):
            t0 = time.monotonic()
        elif line.startswith("SOAK_END") and t0 is not None:
            t1 = time.monotonic()
            kv = dict(f.split("=", 1) for f in line.split()[1:])
            us = float(kv["us_per_call"])
            report(label, us, [s for s in list(samples) if t0 <= s[0] <= t1], t1 - t0)
            t0 = None
    rc = proc.wait()
    stop.set()
    th.join()
    pynvml.nvmlShutdown()
    sys.exit(rc)


def report(label, us, win, wall):
    if len(win) < 10:
        print(f"ENERGY {label} too few samples ({len(win)})", flush=True)
        return
    # The counter's update points: the first sample of each new value.
    pts = [win[0]]
    for s in win[1:]:
        if s[1] != pts[-1][1]:
            pts.append(s)
    if len(pts) >= 3:
        n = len(pts)
        mt = sum(p[0] for p in pts) / n
        me = sum(p[1] for p in pts) / n
        sxx = sum((p[0] - mt) ** 2 for p in pts)
        sxy = sum((p[0] - mt) * (p[1] - me) for p in pts)
        watts = sxy / sxx / 1000.0
    else:
        watts = (win[-1][1] - win[0][1]) / (win[-1][0] - win[0][0]) / 1000.0
    mean_pw = sum(s[2] for s in win) / len(win) / 1000.0
    clk = sum(s[3] for s in win) / len(win)
    cap = 100.0 * sum(1 for s in win if s[4] & SW_POWER_CAP) / len(win)
    hw = 100.0 * sum(1 for s in win if s[4] & (HW_SLOWDOWN | SW_THERMAL)) / len(win)
    print(
        f"ENERGY {label} us_per_call={us:.3f} power_W={watts:.1f} "
        f"mJ_per_call={watts * us / 1000.0:.4f} nvml_avg_W={mean_pw:.1f} sm_MHz={clk:.0f} "
        f"cap={cap:.0f}% hw={hw:.0f}% updates={len(pts)} samples={len(win)} wall_s={wall:.2f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
