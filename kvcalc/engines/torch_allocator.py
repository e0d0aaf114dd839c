"""What PyTorch's CUDA caching allocator takes from the device for a sequence of tensors, beyond their bytes.

An engine that budgets with the device's free memory (SGLang: torch.cuda.mem_get_info before and after the weights
load) sees the allocator's segments, not the tensors' bytes. The rules (pytorch c10/cuda/CUDACachingAllocator.cpp;
the constants moved to c10/core/AllocatorConfig.h in 2.7, unchanged):

- every request is rounded up to a multiple of kMinBlockSize = 512 bytes;
- requests up to kSmallSize = 1 MiB share segments of kSmallBuffer = 2 MiB (the small pool);
- requests below kMinLargeAlloc = 10 MiB open segments of kLargeBuffer = 20 MiB, larger ones a segment rounded up
  to kRoundLarge = 2 MiB (the large pool); a block is split when more than 1 MiB would remain, and later requests
  of the pool take the best-fitting free block first.

So a weight tensor of 17.5 MiB (Qwen2.5-32B's fused qkv at TP 4) holds 18 MiB of the device, and a model whose
shards are not multiples of 2 MiB loads a few hundred MiB more than its parameters (expandable segments, off by
default, would avoid it).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..units import MiB

MIN_BLOCK = 512
SMALL_SIZE = 1 * MiB
SMALL_BUFFER = 2 * MiB
MIN_LARGE_ALLOC = 10 * MiB
LARGE_BUFFER = 20 * MiB
ROUND_LARGE = 2 * MiB


def segment_size(size: int) -> int:
    """The segment cudaMalloc'd for a request no free block holds (CUDACachingAllocator.cpp get_allocation_size)."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def reserved_bytes(sizes: Iterable[int]) -> int:
    """Device bytes the allocator reserves to hold tensors of these sizes, allocated in this order and never freed
    (a model's weights): each request takes the smallest free block that holds it (best fit, in its pool: small up to
    1 MiB, large above), else a new segment; the rest of the block stays free when it is worth a split (at least
    512 bytes in the small pool, more than 1 MiB in the large one)."""
    reserved = 0
    free: dict[bool, list[int]] = {True: [], False: []}  # small pool?, free block sizes
    for size in sizes:
        size = -(-max(int(size), 1) // MIN_BLOCK) * MIN_BLOCK
        small = size <= SMALL_SIZE
        fits = [b for b in free[small] if b >= size]
        if fits:
            block = min(fits)
            free[small].remove(block)
        else:
            block = segment_size(size)
            reserved += block
        rest = block - size
        if (rest >= MIN_BLOCK) if small else (rest > SMALL_SIZE):
            free[small].append(rest)
    return reserved


def rounding_bytes(sizes: Iterable[int]) -> int:
    """reserved_bytes(sizes) - their bytes: what the device loses to the allocator's rounding."""
    sizes = [int(s) for s in sizes]
    return reserved_bytes(sizes) - sum(sizes)
