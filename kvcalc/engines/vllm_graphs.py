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
"starts, then fails at graph capture". The V2 runner's capture (and the 0.29+ estimate of it) is sized from its
structure below (graph_pool, through engines/vllm.py v2_graph_pool); V1 before 0.21 and V0 keep the fitted constant
`cudagraph_capture_bytes` (kvcalc/data/constants.yaml, from the H200 logs' "Graph capturing finished ... took X GiB").
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


# ------------------------------------------------------------------------------------------------ the graphs' size
# What the V2 model runner captures (read in the release wheels) and what that capture keeps on the device:
#
# - Capture sizes (config/vllm.py _set_cudagraph_sizes, :2388-2540 at v0.31.0, the same grid at v0.26.0 :1783-1845):
#   max_cudagraph_capture_size = min(max_num_seqs x decode_query_len x 2, 512; 1024 on compute-capability family
#   10 from 0.28.0), capped at max_num_batched_tokens; sizes [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16),
#   plus max_num_batched_tokens when it is below the cap (51 sizes at the 512 cap).
# - cudagraph_mode FULL_AND_PIECEWISE (the default in every H200 and public 0.26+ log): one PIECEWISE capture per
#   size, which the torch.compile split at every attention op makes one graph per piece between two attention ops
#   (num_layers + 1 graphs a size; compilation/backends.py split_graph, splitting_ops = the attention ops and
#   unified_kv_cache_update, which adds no piece of its own: nothing runs between it and the attention op), and one
#   FULL decode graph per size whose request count fits max_num_seqs (v1/worker/gpu/cudagraph_utils.py
#   _init_candidates, :249-386 at v0.31.0: `rounded_num_reqs > self.max_num_reqs` -> skipped).
# - The stream of the FULL captures: 0.26-0.28 call torch.cuda.graph(graph, self.pool) with no stream
#   (cudagraph_utils.py:349 at v0.26.0, :354 at v0.27.1, :365 at v0.28.0), so they record on torch's own side stream
#   while the PIECEWISE graphs record on graph_capture()'s stream (compilation/cuda_graph.py passes
#   stream=current_stream()); torch's caching allocator gives a segment only to the stream it was allocated on, so
#   the FULL graphs cannot reuse the PIECEWISE graphs' pool (vllm#53818, sgl-project/sglang#33220 quoting
#   torch/_inductor/cudagraph_trees.py). From 0.29.0 the FULL captures pass stream=current_stream()
#   (cudagraph_utils.py:386-388 at v0.29.0, `stream=self._capture_stream(desc)` from 0.30.0) and fit in the pool
#   the PIECEWISE graphs already hold ("PIECEWISE has larger activations so FULL activations should fit in already
#   allocated buffers", :471-473 at v0.31.0).
# - 0.29+ subtracts an estimate (profile_cudagraph_memory, :854-957 at v0.31.0): a throwaway capture of every
#   PIECEWISE graph, measured as the drop in free memory, with only the two largest FULL graphs captured and the
#   rest extrapolated as first + (N - 1) x max(second, 1 MiB) (_extrapolate_full_graph_memory, :959-967).
#
# Per-graph bytes the sources do not give (the driver's graph objects, the pool's fragments): fitted on the
# project's own H200 captures of vLLM 0.26.0 (scripts/fit_cudagraphs.py; leave-one-out errors in
# docs/validation/README.md), never on the public 0.27+ logs. ROCm: every hipGraphExec allocates its own device
# memory (its kernel-argument pool, ROCm/clr hipamd/src/hip_graph_internal.cpp GraphKernelArgManager::
# AllocGraphKernargPool -> deviceLocalAlloc; "hipGraph requires memory each time one is captured", 4 MiB a graph
# with HSA_DISABLE_FRAGMENT_ALLOCATOR=1, ROCm/pytorch#2286; vllm#19579: PIECEWISE capture much larger on MI300 than
# on H100, FULL capture not), so a HIP piece graph costs ~10x a CUDA one: its size is read from one MI300X start
# outside the 0.27+ log table (scripts/fit_cudagraphs.py ROCM_START), the table's MI300X starts held out.
DEFAULT_MAX_CAPTURE = 512
BLACKWELL_MAX_CAPTURE = 1024  # config/vllm.py:2453-2455 at v0.31.0 (is_device_capability_family(100)), from 0.28.0
BLACKWELL_MAX_CAPTURE_SINCE = (0, 28, 0)
FULL_SAME_STREAM_SINCE = (0, 29, 0)  # FULL graphs captured on graph_capture()'s stream (cudagraph_utils.py:386)
MIN_PER_GRAPH_BYTES = 1 << 20  # _MIN_PER_GRAPH_BYTES, cudagraph_utils.py:850 at v0.31.0
MODES = ("capture", "estimate")


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, decode_query_len: int = 1,
                  compute_capability: float | None = None, release: tuple = (0, 26, 0)) -> list[int]:
    """cudagraph_capture_sizes as vLLM builds them by default (config/vllm.py _set_cudagraph_sizes)."""
    default_max = DEFAULT_MAX_CAPTURE
    if release >= BLACKWELL_MAX_CAPTURE_SINCE and compute_capability is not None and int(compute_capability) == 10:
        default_max = BLACKWELL_MAX_CAPTURE
    cap = max(1, min(max_num_seqs * decode_query_len * 2, default_max, max_num_batched_tokens))
    sizes = [i for i in (1, 2, 4) if i <= cap]
    sizes += list(range(8, min(cap + 1, 256), 8))
    sizes += list(range(256, cap + 1, 16))
    if max_num_batched_tokens <= cap:
        sizes.append(max_num_batched_tokens)
    return sorted(set(sizes))


def full_decode_sizes(sizes: list[int], max_num_seqs: int, decode_query_len: int = 1) -> list[int]:
    """The FULL decode graphs: sizes rounded up to decode_query_len whose request count fits max_num_seqs and whose
    tokens fit the largest capture size (cudagraph_utils.py _init_candidates)."""
    out = set()
    for n in sizes:
        rounded = -(-n // decode_query_len) * decode_query_len
        if rounded // decode_query_len <= max_num_seqs and rounded <= max(sizes):
            out.add(rounded)
    return sorted(out)


@dataclass(frozen=True)
class GraphPool:
    """One rank's CUDA-graph memory as the structure above sizes it."""

    sizes: int  # capture sizes (PIECEWISE captures)
    piece_graphs: int  # PIECEWISE graphs: sizes x (layers + 1)
    full_graphs: int  # FULL decode graphs
    workspace_bytes: int  # the BLAS workspace torch allocates for the capture stream
    piece_bytes: int  # the PIECEWISE graphs
    full_bytes: int  # the FULL graphs (0.26-0.28: their own pool; 0.29+: the estimate's 1 MiB floor per graph)
    mode: str  # "capture" (what the capture takes) or "estimate" (what 0.29+'s profile subtracts)

    @property
    def total_bytes(self) -> int:
        return self.workspace_bytes + self.piece_bytes + self.full_bytes

    def describe(self) -> str:
        what = "the profile's estimate" if self.mode == "estimate" else "the capture"
        return (f"CUDA graphs ({what}): {self.piece_graphs:,} PIECEWISE graphs ({self.sizes} sizes) "
                f"{self.piece_bytes / GiB:.2f} GiB + {self.full_graphs} FULL decode graphs {self.full_bytes / GiB:.2f} "
                f"GiB + capture-stream BLAS workspace {self.workspace_bytes / GiB:.2f} GiB = {self.total_bytes / GiB:.2f} "
                "GiB")


def graph_pool(num_layers: int, hidden_size: int, max_num_seqs: int, max_num_batched_tokens: int, *,
               piece_graph_bytes: float, full_token_bytes_per_hidden: float, workspace_bytes: int,
               mode: str = "capture", decode_query_len: int = 1, compute_capability: float | None = None,
               release: tuple = (0, 26, 0), full_graphs_on: bool = True) -> GraphPool:
    """The V2 runner's graphs on one rank (see the block above). piece_graph_bytes per PIECEWISE graph (the platform's:
    CUDA or HIP); before 0.29 each FULL graph keeps full_token_bytes_per_hidden x hidden_size per captured token in
    its own pool (its side stream), from 0.29 it fits in the PIECEWISE pool and costs only what its graph object
    takes, which the 0.29+ estimate floors at 1 MiB a graph after the first."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {MODES}")
    sizes = capture_sizes(max_num_seqs, max_num_batched_tokens, decode_query_len, compute_capability, release)
    full = full_decode_sizes(sizes, max_num_seqs, decode_query_len) if full_graphs_on else []
    pieces = len(sizes) * (num_layers + 1)
    if release < FULL_SAME_STREAM_SINCE:
        full_bytes = int(full_token_bytes_per_hidden * hidden_size * sum(full))
    else:
        full_bytes = max(len(full) - 1, 0) * MIN_PER_GRAPH_BYTES if mode == "estimate" else 0
    return GraphPool(len(sizes), pieces, len(full), int(workspace_bytes), int(piece_graph_bytes * pieces), full_bytes,
                     mode)
