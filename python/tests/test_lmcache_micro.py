# SPDX-License-Identifier: Apache-2.0
"""bench/lmcache_micro.py's KV layout and data check, on CPU tensors: the pool is shaped and
strided as a vLLM attention backend declares it, slots stay inside it, and the check compares
the same logical block on both sides, so a copy that is right passes and any wrong, altered or
stray layer-block is counted. The LMCache transfer itself needs CUDA and runs in
scripts/gpu-run.sh (lmcache-micro)."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lmcache_micro as micro  # noqa: E402

# The shapes and stride orders vLLM's attention backends declare (get_kv_cache_shape,
# get_kv_cache_stride_order) for 8 KV heads of 128 in blocks of 16 tokens.
VLLM_026_NHD = ("FlashAttention, vLLM 0.26, NHD", "NHD", lambda n: (n, 8, 16, 256), (0, 2, 1, 3))
VLLM_026_HND = ("FlashAttention, vLLM 0.26, HND", "HND", lambda n: (n, 8, 16, 256), (0, 1, 2, 3))
VLLM_OLD_NHD = ("FlashAttention, older vLLM, NHD", "NHD", lambda n: (2, n, 16, 8, 128),
                (0, 1, 2, 3, 4))
LAYOUTS = [VLLM_026_NHD, VLLM_026_HND, VLLM_OLD_NHD]


def layout(spec):
    return micro.KVLayout(*spec)


def lmcache_view(t):
    """What LMCache's contiguity step does to a registered tensor: axes sorted by stride."""
    order = sorted(range(t.dim()), key=lambda i: t.stride()[i], reverse=True)
    return t.permute(order)


def test_vllm_026_registers_a_view_of_blocks_tokens_heads_and_k_beside_v():
    lay = layout(VLLM_026_NHD)
    kv = lay.allocate(5, "cpu")
    assert len(kv) == micro.LAYERS
    t = kv[0]
    assert t.shape == (5, 8, 16, 256) and t.dtype == torch.bfloat16
    assert not t.is_contiguous()  # the logical (blocks, heads, tokens, 2 x head) view
    memory = lay.in_memory_order(t)
    assert memory.shape == (5, 16, 8, 256) and memory.is_contiguous()
    assert memory.data_ptr() == t.data_ptr()
    assert lmcache_view(t).shape == memory.shape and lmcache_view(t).is_contiguous()
    assert (lay.block_axis, lay.memory_block_axis) == (0, 0)
    assert lay.memory_shape(5) == (5, 16, 8, 256)
    assert all(int(x.view(torch.int16).count_nonzero()) == 0 for x in kv)
    assert len({x.data_ptr() for x in kv}) == micro.LAYERS  # one allocation per layer


def test_other_layouts_find_their_block_axis_in_memory():
    hnd = layout(VLLM_026_HND)
    assert hnd.memory_shape(5) == (5, 8, 16, 256) and hnd.memory_block_axis == 0
    old = layout(VLLM_OLD_NHD)
    assert old.block_axis == 1 and old.memory_block_axis == 1
    t = old.allocate(5, "cpu")[0]
    assert t.shape == (2, 5, 16, 8, 128) and t.is_contiguous()


@pytest.mark.parametrize("shape_of, order", [
    (lambda n: (n, 8, 16, 128), (0, 2, 1, 3)),    # half a block: the pool would be too small
    (lambda n: (2, 16, 8, 128 * n), (0, 1, 2, 3)),  # no axis that is the number of blocks
    (lambda n: (n, 8, 16, 256), (0, 2, 1)),       # a stride order of another rank
])
def test_a_layout_of_the_wrong_size_is_refused_before_allocating(shape_of, order):
    with pytest.raises(micro.BenchError):
        layout(("bad", "NHD", shape_of, order)).allocate(5, "cpu")


def test_slots_follow_the_block_table_and_must_lie_in_the_pool():
    slots = micro.slot_mapping(torch.tensor([7, 2]))
    assert slots.dtype == torch.long
    assert slots.tolist() == list(range(112, 128)) + list(range(32, 48))
    micro.check_slots(slots, 32, pool_blocks=8)
    with pytest.raises(micro.BenchError, match="outside the pool"):
        micro.check_slots(slots, 32, pool_blocks=7)
    with pytest.raises(micro.BenchError):
        micro.check_slots(slots, 48, pool_blocks=8)
    with pytest.raises(micro.BenchError):
        micro.check_slots(slots.int(), 32, pool_blocks=8)


def copy_blocks(lay, kv, src, dst):
    for t in kv:
        memory = lay.in_memory_order(t)
        memory.index_copy_(lay.memory_block_axis, dst,
                           memory.index_select(lay.memory_block_axis, src))


@pytest.mark.parametrize("spec", LAYOUTS, ids=[s[0] for s in LAYOUTS])
def test_the_check_compares_the_same_logical_block_on_both_sides(spec):
    lay, pool = layout(spec), 9
    kv = lay.allocate(pool, "cpu")
    src, dst = torch.tensor([3, 7, 1]), torch.tensor([8, 2, 5])
    micro.fill_blocks(lay, kv, src, seed=11)
    micro.poison_blocks(lay, kv, dst)
    assert micro.check_blocks(lay, kv, src, dst, seed=11) == (micro.LAYERS * 3, 0, 0)
    assert micro.check_blocks(lay, kv, src, src, seed=11)[1] == 0  # the source holds the seed's
    assert micro.check_blocks(lay, kv, src, src, seed=12)[1] == micro.LAYERS * 3

    copy_blocks(lay, kv, src, dst)
    assert micro.check_blocks(lay, kv, src, dst, seed=11) == (0, 0, 0)
    copy_blocks(lay, kv, src[[1, 0]], dst[:2])  # two request blocks retrieved swapped
    assert micro.check_blocks(lay, kv, src, dst, seed=11) == (micro.LAYERS * 2, 0, 0)
    copy_blocks(lay, kv, src, dst)

    def poke(layer, block):
        one = lay.in_memory_order(kv[layer]).select(lay.memory_block_axis, block)
        one[tuple(n // 2 for n in one.shape)] ^= 1  # one bit of one element

    poke(4, 2)
    assert micro.check_blocks(lay, kv, src, dst, seed=11) == (1, 0, 0)
    poke(0, 7)
    assert micro.check_blocks(lay, kv, src, dst, seed=11) == (1, 1, 0)
    poke(31, micro.NULL_BLOCK)
    poke(31, 6)
    assert micro.check_blocks(lay, kv, src, dst, seed=11) == (1, 1, 2)


def test_a_transfer_by_slots_in_vllm_026s_page_buffer_passes_the_check():
    # LMCache addresses the NL x [NB, BS, NH, CS] format by slot over num_blocks x block_size.
    lay = layout(VLLM_026_NHD)
    kv = lay.allocate(9, "cpu")
    src, dst = torch.tensor([3, 7, 1]), torch.tensor([8, 2, 5])
    micro.fill_blocks(lay, kv, src, seed=5)
    micro.poison_blocks(lay, kv, dst)
    src_slots, dst_slots = micro.slot_mapping(src), micro.slot_mapping(dst)
    for t in kv:
        page_buffer = lay.in_memory_order(t).view(9 * micro.BLOCK_TOKENS, -1)
        page_buffer[dst_slots] = page_buffer[src_slots]
    assert micro.check_blocks(lay, kv, src, dst, seed=5) == (0, 0, 0)
