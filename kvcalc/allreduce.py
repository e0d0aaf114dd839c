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

The constants of each link (kvcalc/data/interconnect.yaml) come from published NCCL/RCCL numbers and vendor
datasheets, each with its source there: none is fitted on the public speed corpus. A pure function of the GPU
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

    def latency_s(self, tp: int) -> float:
        if tp <= 1:
            return 0.0
        return self.base_s if self.algorithm == "custom" else self.base_s + 2 * (tp - 1) * self.hop_s

    def allreduce_s(self, tp: int, nbytes: float) -> float:
        """One all-reduce of `nbytes` over `tp` GPUs."""
        if tp <= 1:
            return 0.0
        return self.latency_s(tp) + 2 * (tp - 1) / tp * nbytes / self.bus_bytes_per_s

    def describe(self, tp: int) -> str:
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
    if name == "nvlink":
        bus = _nvlink_per_direction(gpu, data["nvlink_per_direction_gb_s"]) * c["bus_fraction"]
    elif name == "xgmi":
        bus = c["per_link_bytes_per_s"] * max(1, tp - 1)  # fully connected: a peer per link
    elif name == "nvlink-bridge":
        bus = c["bus_bytes_per_s"]
    else:
        gen = PCIE_GEN.get(gpu.architecture or "", 4)
        bus = data["pcie_x16_per_direction_gb_s"][gen] * 1e9 * c["bus_fraction"]
    return Link(name, c["algorithm"], float(c["base_s"]), float(c.get("hop_s", 0.0)), bus, c["source"])
