"""Tensor-parallel all-reduce time per link (issue 18): what one all-reduce of a layer's hidden states costs on the
interconnect between a GPU's tensor-parallel peers.

Each decoder layer all-reduces twice (after attention, after the MLP) a buffer of tokens x hidden x dtype bytes. One
all-reduce over n GPUs costs

    latency(n) + 2 (n - 1) / n x bytes / bus_bandwidth

(a ring moves 2 (n - 1) / n of the buffer through each GPU's link: the nccl-tests definition of bus bandwidth), with

    latency(n) = base_s                             vLLM's custom all-reduce (one kernel, peers read each other's
                                                    buffer: NVLink/NVSwitch boards, xGMI meshes)
    latency(n) = base_s + 2 (n - 1) x hop_s         NCCL's ring with the LL protocol (2 (n - 1) steps, NCCL
                                                    src/graph/tuning.cc), the path PCIe boards take

On NVLink (vLLM's custom all-reduce, algorithm custom) the time of a call below 4 MiB is not latency + ring bytes:
the kernel's own table, timed per call on 8 x H100 at 2, 4 and 8 GPUs (interconnect.yaml custom_table_s), grows
with the group size and the bytes far faster than NVLink's bus bandwidth (a decode step's 57-131 KiB call at TP 8
takes 9.5-11 us, against 8.2-8.6 us for latency + ring bytes at 378 GB/s; 1 MiB takes 23 us, not 12.8). Link.call_s
reads it; latency_s stays the call's floor (the fixed part throughput._overhead books per layer).

The constants of each link (kvcalc/data/interconnect.yaml) come from published NCCL/RCCL numbers, vLLM's kernel
timings and vendor datasheets, each with its source there: none is fitted on the public speed corpus. A pure function of the GPU
profile, the tensor-parallel size and the bytes; throughput.py adds it to the step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .constants import load
from .hardware.profile import GpuProfile

# the PCIe generation a GPU's host link runs at, by architecture (x16 in every profile kvcalc has)
PCIE_GEN = {"Volta": 3, "Turing": 3, "Ampere": 4, "Ada": 4, "Hopper": 5, "Blackwell": 5, "Blackwell Ultra": 5,
            "CDNA3": 5, "CDNA4": 5}


@dataclass(frozen=True)
class Link:
    """One GPU's tensor-parallel interconnect at one TP size."""

    name: str  # interconnect.yaml class: nvlink, nvlink-bridge, pcie-p2p, pcie-host, xgmi
    algorithm: str  # "custom" (vLLM's one-shot kernel) or "ring" (NCCL/RCCL ring, LL protocol)
    base_s: float
    hop_s: float
    bus_bytes_per_s: float
    source: str
    # vLLM's custom all-reduce timed per call (interconnect.yaml custom_table_*): the sizes (bytes), the seconds per
    # group size, and the bytes part's scale for this link's NVLink generation (its per-direction rate over the
    # table's); empty: latency + ring bytes at every size
    table_bytes: tuple = ()
    table_s: tuple = ()  # ((group size, (seconds at each size)), ...)
    table_scale: float = 1.0

    def latency_s(self, tp: int) -> float:
        if tp <= 1:
            return 0.0
        return self.base_s if self.algorithm == "custom" else self.base_s + 2 * (tp - 1) * self.hop_s

    def ring_bytes_s(self, tp: int, nbytes):
        """A ring's bytes: 2 (n - 1) / n of the buffer through each GPU's link at the bus bandwidth."""
        return 2 * (tp - 1) / tp * nbytes / self.bus_bytes_per_s

    def _table(self, tp: int) -> tuple | None:
        if not self.table_s or tp <= 1:
            return None
        sizes = [n for n, _ in self.table_s]
        pick = next((n for n in sorted(sizes) if n >= tp), max(sizes))  # between the table's sizes: the larger one
        return dict(self.table_s)[pick]

    def call_s(self, tp: int, nbytes):
        """One all-reduce of `nbytes` (a scalar or an array) over `tp` GPUs, its latency included."""
        if tp <= 1:
            return 0.0 * nbytes
        times = self._table(tp)
        if times is None:
            return self.latency_s(tp) + self.ring_bytes_s(tp, nbytes)
        import numpy as np

        floor = dict(self.table_s)[min(n for n, _ in self.table_s)][0]  # the smallest group's smallest call
        top = self.table_bytes[-1]
        inside = np.interp(np.minimum(nbytes, top), self.table_bytes, times)  # flat below the first size
        extra = (inside - floor) / self.table_scale  # the table's time over its TP 2 floor, at this NVLink's rate
        t = self.base_s + np.maximum(extra, 0.0) + self.ring_bytes_s(tp, np.maximum(nbytes - top, 0.0))
        return float(t) if np.ndim(t) == 0 else t

    def allreduce_s(self, tp: int, nbytes: float) -> float:
        """One all-reduce of `nbytes` over `tp` GPUs."""
        return self.call_s(tp, nbytes)

    def describe(self, tp: int) -> str:
        if self._table(tp) is not None:
            return (f"{self.name} ({self.algorithm} all-reduce at TP {tp}: {self.latency_s(tp) * 1e6:.1f} us per call "
                    f"at least, {self.call_s(tp, 1 << 17) * 1e6:.1f} us at 128 KiB, {self.call_s(tp, 1 << 20) * 1e6:.1f}"
                    f" us at 1 MiB: vLLM's kernel timed on 8 x H100, sglang#2904; beyond 4 MiB "
                    f"{self.bus_bytes_per_s / 1e9:.0f} GB/s bus bandwidth)")
        return (f"{self.name} ({self.algorithm} all-reduce at TP {tp}: {self.latency_s(tp) * 1e6:.1f} us per call + "
                f"bytes at {self.bus_bytes_per_s / 1e9:.0f} GB/s bus bandwidth)")


def _nvlink_per_direction(gpu: GpuProfile, table: dict) -> float:
    """NVLink bytes/s per direction: the profile's own interconnect line where it states a figure ('NVLink 400 GB/s'
    is bidirectional, NVIDIA's convention), else the generation's (interconnect.yaml nvlink_per_direction)."""
    text = (gpu.sources or {}).get("interconnect", "")
    m = re.search(r"NVLink (\d+) GB/s", text)
    if m:
        return int(m.group(1)) * 1e9 / 2
    return float(table.get(gpu.architecture or "", table["Hopper"])) * 1e9


def link_class(gpu: GpuProfile, tp: int) -> str:
    """Which interconnect.yaml class a GPU's TP group of `tp` all-reduces over."""
    form = (gpu.form_factor or "").lower()
    if gpu.vendor == "amd":
        return "xgmi"  # Infinity Fabric between the OAM modules of an 8-GPU platform
    if "sxm" in form or "superchip" in form:
        return "nvlink"
    if "nvlink bridge" in form:
        return "nvlink-bridge" if tp <= 2 else "pcie-p2p"  # a bridge pairs two boards; beyond, PCIe
    if "consumer" in form:
        return "pcie-host"  # GeForce: no peer-to-peer over PCIe, NCCL stages every transfer through host memory
    return "pcie-p2p"


def link_for(gpu: GpuProfile, tp: int) -> Link:
    """The link model of `gpu`'s tensor-parallel group of `tp` GPUs (interconnect.yaml)."""
    data = load("interconnect")
    name = link_class(gpu, tp)
    c = data["links"][name]
    table: dict = {}
    if name == "nvlink":
        per_direction = _nvlink_per_direction(gpu, data["nvlink_per_direction_gb_s"])
        bus = per_direction * c["bus_fraction"]
        if c.get("custom_table_s"):
            table = dict(table_bytes=tuple(float(b) for b in c["custom_table_bytes"]),
                         table_s=tuple((int(n), tuple(float(x) for x in ts)) for n, ts in c["custom_table_s"].items()),
                         table_scale=per_direction / (float(c["custom_table_link_gb_s"]) * 1e9))
    elif name == "xgmi":
        bus = c["per_link_bytes_per_s"] * max(1, tp - 1)  # fully connected: a peer per link
    elif name == "nvlink-bridge":
        bus = c["bus_bytes_per_s"]
    else:
        gen = PCIE_GEN.get(gpu.architecture or "", 4)
        bus = data["pcie_x16_per_direction_gb_s"][gen] * 1e9 * c["bus_fraction"]
    return Link(name, c["algorithm"], float(c["base_s"]), float(c.get("hop_s", 0.0)), bus, c["source"], **table)
