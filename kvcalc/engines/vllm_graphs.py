"""Where vLLM's CUDA graphs live, per release, and whether their capture after the KV cache finds room.

vLLM allocates the KV cache to fill gpu_memory_utilization first and captures CUDA graphs afterwards
(v1/worker/gpu_worker.py at v0.26.0, `compile_or_warm_up_model` -> `model_runner.capture_model()`, run after
`initialize_from_config` allocated the cache). Whether that capture is inside the budget depends on the release:

- "in_budget": 0.21+ on the V1 model runner profiles the graphs first and subtracts the estimate from the KV budget
  (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 by default since 0.21.0, vllm#38284; gpu_worker.py:494-527 at v0.26.0).
- "after_kv": the graphs come on top of the budget, so weights + activations + KV pool (= total x util) + graphs
  must fit the GPU. Three cases: the V2 model runner of 0.26 (v1/worker/gpu/model_runner.py:profile_cudagraph_memory
  returns 0); V1 before 0.21, where the estimate was off by default ("Without it, CUDA graph memory is not accounted
  for during KV cache allocation, which may require lowering --gpu-memory-utilization to avoid OOM",
  gpu_worker.py:590-600 at v0.26.0); and V0 (worker/worker.py: graphs captured in `_warm_up_model` after the cache
  engine, never subtracted; engines/vllm_versions.py 0.4.0 row).
- "none": --enforce-eager captures nothing.

Such a server loads, profiles and allocates its cache, then dies in capture with a CUDA out-of-memory error: it
"starts, then fails at graph capture". The size of the capture is the fitted constant `cudagraph_capture_bytes`
(kvcalc/data/constants.yaml, from the H200 logs' "Graph capturing finished ... took X GiB").
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import GiB

PLACEMENTS = ("none", "in_budget", "after_kv")


def graph_placement(enforce_eager: bool, v2_runner: bool, estimate_subtracted: bool) -> str:
    """Where this release puts its CUDA graphs (see the module doc)."""
    if enforce_eager:
        return "none"
    if v2_runner or not estimate_subtracted:
        return "after_kv"
    return "in_budget"


@dataclass(frozen=True)
class GraphCapture:
    """CUDA-graph capture of one rank: where it lives, its size beyond the budget and the room left for it."""

    placement: str  # one of PLACEMENTS
    capture_bytes: int  # graphs captured beyond the budget (after_kv; 0 otherwise)
    headroom_bytes: int  # GPU memory outside what vLLM already holds when capture starts (never below 0)
    starts: bool  # vLLM gets as far as capture: it loads, profiles and allocates a KV cache that holds a request

    @property
    def margin_bytes(self) -> int:
        """Room left after capture (negative: capture runs out of memory by that much)."""
        return self.headroom_bytes - self.capture_bytes

    @property
    def overflow_bytes(self) -> int:
        return max(-self.margin_bytes, 0) if self.placement == "after_kv" else 0

    @property
    def fails_at_capture(self) -> bool:
        """The server starts (weights, profile, KV cache) and then runs out of memory capturing graphs."""
        return self.starts and self.overflow_bytes > 0

    def verdict(self) -> str | None:
        """The plan table's verdict for a row that starts and then fails at capture (None otherwise)."""
        if not self.fails_at_capture:
            return None
        return f"starts, then fails at graph capture (short {self.overflow_bytes / GiB:.2f} GiB)"

    def describe(self) -> str:
        """One line for explain and the gate: where the graphs are and the margin."""
        if self.placement == "none":
            return "CUDA graphs: none (--enforce-eager)"
        if self.placement == "in_budget":
            return "CUDA graphs: profiled and subtracted from the KV budget (inside gpu_memory_utilization)"
        return (f"CUDA graphs: ~{self.capture_bytes / GiB:.2f} GiB captured after the KV cache, beyond "
                f"gpu_memory_utilization; {self.headroom_bytes / GiB:.2f} GiB left outside vLLM's share: margin "
                f"{self.margin_bytes / GiB:+.2f} GiB")


def max_graph_tokens(max_num_seqs: int, max_num_batched_tokens: int, speculative_tokens: int = 0) -> int:
    """The largest step (in tokens) vLLM replays as a CUDA graph: max_cudagraph_capture_size's default,
    min(max_num_seqs x (1 + speculative tokens) x 2, 512), capped by max_num_batched_tokens (vllm/config/vllm.py:
    1792-1798, v0.26.0). A bigger step runs without graphs (v1/cudagraph_dispatcher.py:274-281)."""
    return max(1, min(max_num_seqs * (1 + speculative_tokens) * 2, 512, max_num_batched_tokens))
