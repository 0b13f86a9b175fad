"""NVML telemetry: a background sampler of power, clocks, temperature and
clock-event (throttle) reasons, as a context manager.

Without a GPU or NVML the sampler yields an empty record that says why.
"""
from __future__ import annotations

import threading
import time
from typing import Any

_REASON_NAMES = {
    "clocksEventReasonGpuIdle": "gpu_idle",
    "clocksEventReasonApplicationsClocksSetting": "applications_clocks_setting",
    "clocksEventReasonSwPowerCap": "sw_power_cap",
    "clocksEventReasonHwSlowdown": "hw_slowdown",
    "clocksEventReasonSyncBoost": "sync_boost",
    "clocksEventReasonSwThermalSlowdown": "sw_thermal_slowdown",
    "clocksEventReasonHwThermalSlowdown": "hw_thermal_slowdown",
    "clocksEventReasonHwPowerBrakeSlowdown": "hw_power_brake_slowdown",
    "clocksEventReasonDisplayClockSetting": "display_clock_setting",
}


def _nvml(index: int = 0):
    """(pynvml module, handle) or raise RuntimeError saying why not."""
    try:
        import pynvml  # nvidia-ml-py may be missing: reported as RuntimeError below
    except ImportError:
        raise RuntimeError("nvidia-ml-py is not installed") from None
    try:
        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as e:  # NVMLError: no driver, no device
        raise RuntimeError(f"NVML unavailable: {e}") from None


def decode_reasons(mask: int) -> list[str]:
    """Clock-event reason bitmask -> names (``gpu_idle`` is kept: it is a reason too)."""
    import pynvml  # deferred: pynvml (nvidia-ml-py) loads only where NVML is used

    names = []
    for attr, name in _REASON_NAMES.items():
        bit = getattr(pynvml, attr, None)
        if bit is None:  # older bindings spell it "clocksThrottleReason..."
            bit = getattr(pynvml, attr.replace("clocksEventReason", "clocksThrottleReason"), None)
        if bit is not None and mask & bit:
            names.append(name)
    return names


def _read(pynvml, h) -> dict[str, Any]:
    def get(fn, *a):
        try:
            return fn(h, *a)
        except Exception:
            return None

    power = get(pynvml.nvmlDeviceGetPowerUsage)
    mask = get(getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)
    return {
        "t": time.perf_counter(),
        "power_w": None if power is None else power / 1000.0,
        "sm_mhz": get(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM),
        "mem_mhz": get(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM),
        "temp_c": get(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU),
        "reasons": [] if mask is None else decode_reasons(mask),
    }


def snapshot(index: int = 0) -> dict[str, Any]:
    """One reading: ``{"clocks": {...}, "throttle": [...], ...}`` or ``{"why": ...}``."""
    try:
        pynvml, h = _nvml(index)
    except RuntimeError as e:
        return {"why": str(e), "clocks": {}, "throttle": []}
    r = _read(pynvml, h)
    limit = None
    try:
        limit = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
    except Exception:
        pass
    return {"clocks": {"sm_mhz": r["sm_mhz"], "mem_mhz": r["mem_mhz"]}, "throttle": r["reasons"],
            "power_w": r["power_w"], "temp_c": r["temp_c"], "power_limit_w": limit}


class Sampler:
    """Samples NVML every ``interval`` seconds in a background thread::

        with Sampler(0.05) as s:
            run_work()
        s.samples      # list of dicts: t, power_w, sm_mhz, mem_mhz, temp_c, reasons
        s.summary()    # averages, p95 power, reasons seen

    Without NVML, ``s.samples`` is empty and ``s.why`` says why.
    """

    def __init__(self, interval: float = 0.05, index: int = 0):
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        self.interval, self.index = interval, index
        self.samples: list[dict[str, Any]] = []
        self.why: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Sampler":
        try:
            self._pynvml, self._h = _nvml(self.index)
        except RuntimeError as e:
            self.why = str(e)
            return self
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            r = _read(self._pynvml, self._h)
            r["t"] -= self._t0
            self.samples.append(r)
            self._stop.wait(self.interval)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def summary(self) -> dict[str, Any]:
        if not self.samples:
            return {"n": 0, "why": self.why or "no samples"}
        import numpy as np  # deferred: keeps numpy off the import path of t4lib.core.results

        def col(k):
            return np.array([s[k] for s in self.samples if s[k] is not None], dtype=float)

        p, sm, mem, tc = col("power_w"), col("sm_mhz"), col("mem_mhz"), col("temp_c")
        seen = sorted({r for s in self.samples for r in s["reasons"]})
        return {"n": len(self.samples), "seconds": self.samples[-1]["t"] - self.samples[0]["t"],
                "power_avg_w": float(p.mean()) if p.size else None,
                "power_p95_w": float(np.percentile(p, 95)) if p.size else None,
                "sm_mhz_avg": float(sm.mean()) if sm.size else None,
                "mem_mhz_avg": float(mem.mean()) if mem.size else None,
                "temp_max_c": float(tc.max()) if tc.size else None, "reasons_seen": seen}
