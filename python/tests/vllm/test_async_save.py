# SPDX-License-Identifier: Apache-2.0
"""Asynchronous saves (``async_save``, the default), with vLLM's real classes on its CPU build:
a step returns before its chunks are written, the saver thread writes them in order, a block
handed out again is not written while a save still reads it, shutdown writes what is queued,
and a failing save is counted and logged. The saver thread is held back, where a test needs
a save to be in flight, by a job queued ahead of it on that thread."""

import logging
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from tutti.serving.config import TuttiConfig  # noqa: E402
from tutti.vllm.connector import (  # noqa: E402
    LoadSpec,
    SaveSpec,
    TuttiConnector,
    TuttiConnectorMetadata,
    chunk_key,
)
from tutti.vllm.log import LOGGER_NAME  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vllm_configs import (  # noqa: E402
    RIG_BS,
    RIG_CHUNK,
    RIG_LAYERS,
    RIG_NUM_BLOCKS,
    rig_config,
    rig_extra,
    rig_kv_cache_config,
    rig_worker,
)

BS = RIG_BS
CHUNK = RIG_CHUNK  # 2 blocks
NUM_BLOCKS = RIG_NUM_BLOCKS
LAYERS = RIG_LAYERS
extra, config, kcc, worker = rig_extra, rig_config, rig_kv_cache_config, rig_worker


def keys(n, tag=b"a"):
    return [chunk_key(tag + bytes([c])) for c in range(n)]


def step(w, meta, forward=None):
    """One step as vLLM's model runner drives the worker: handle_preemptions, bind,
    start_load_kv, the forward (``forward()``: what it writes), wait_for_save."""
    w.handle_preemptions(meta)
    w.bind_connector_metadata(meta)
    w.start_load_kv(None)
    if forward is not None:
        forward()
    w.wait_for_save()
    errors = w.get_block_ids_with_load_errors()
    w.clear_connector_metadata()
    return errors


def hold_saver(w):
    """Queue a job ahead of the next saves on the saver thread; set the event to let it end."""
    gate = threading.Event()
    w.worker.saver._executor().submit(gate.wait, 30)
    return gate


def stored(w, ks):
    n, _ = w.worker.store.lookup(ks)
    return n


def blocks_equal(w, a, b):
    return all(torch.equal(t[a], t[b]) for t in w.test_kv.values())


def test_async_save_is_a_flag_on_by_default(tmp_path):
    assert TuttiConfig.from_extra(extra(tmp_path), BS).async_save is True
    assert TuttiConfig.from_extra(extra(tmp_path, async_save="false"), BS).async_save is False
    with pytest.raises(ValueError, match="async_save must be true or false, not 'sometimes'"):
        TuttiConfig.from_extra(extra(tmp_path, async_save="sometimes"), BS)


def test_a_step_returns_before_its_saves_are_written_and_they_follow_in_order(model_dir,
                                                                              tmp_path):
    w = worker(model_dir, extra(tmp_path))
    gate = hold_saver(w)
    k = keys(3)
    # Two steps: the second's chunk has the first's as parent in the store.
    step(w, TuttiConnectorMetadata(saves=[SaveSpec("a", k[:2], 0, [0, 1, 2, 3])]))
    step(w, TuttiConnectorMetadata(saves=[SaveSpec("a", k, 2, [4, 5])]))
    assert stored(w, k) == 0  # both steps returned; nothing written yet
    gate.set()
    w.worker.drain_saves()
    assert stored(w, k) == 3  # in order: the later chunk found its parent stored
    st = w.get_kv_connector_stats().data
    assert st["save_tokens"] == 3 * CHUNK and st.get("save_orphans", 0) == 0
    w.shutdown()


def test_without_async_save_a_step_writes_its_chunks_before_it_returns(model_dir, tmp_path):
    w = worker(model_dir, extra(tmp_path, async_save=False))
    k = keys(2)
    step(w, TuttiConnectorMetadata(saves=[SaveSpec("a", k, 0, [0, 1, 2, 3])]))
    assert stored(w, k) == 2
    assert w.worker.saver._pool is None  # no saver thread started
    w.shutdown()


def test_a_block_handed_out_again_waits_for_the_save_reading_it(model_dir, tmp_path):
    """vLLM frees a finished (or preempted) request's blocks at once and may give them to
    another request in the next step, whose load or forward writes them: the save still
    reading them must be written first, with what the request computed."""
    w = worker(model_dir, extra(tmp_path))
    k = keys(2)
    original = {n: t[0:4].clone() for n, t in w.test_kv.items()}
    gate = hold_saver(w)
    step(w, TuttiConnectorMetadata(saves=[SaveSpec("a", k, 0, [0, 1, 2, 3])]))

    # A step handing out other blocks does not wait.
    t0 = time.monotonic()
    step(w, TuttiConnectorMetadata(new_blocks=[10, 11]))
    assert time.monotonic() - t0 < 5 and stored(w, k) == 0

    # Block 2 handed out again: the step waits for the save, then overwrites the block.
    def overwrite():
        for t in w.test_kv.values():
            t[2].fill_(7.0)

    done = threading.Event()
    runner = threading.Thread(target=lambda: (step(w, TuttiConnectorMetadata(new_blocks=[2]),
                                                   overwrite), done.set()))
    runner.start()
    assert not done.wait(0.5)  # held: the save has not been written
    gate.set()
    runner.join(30)
    assert done.is_set()
    # What was stored is what the request computed, not what the next step wrote.
    dst = [20, 21, 22, 23]
    step(w, TuttiConnectorMetadata(loads=[LoadSpec("b", k, 0, 0, dst)]))
    for n, t in w.test_kv.items():
        assert torch.equal(t[dst], original[n])
    w.shutdown()


def test_shutdown_writes_the_queued_saves_before_closing_the_store(model_dir, tmp_path, caplog):
    w = worker(model_dir, extra(tmp_path))
    gate = hold_saver(w)
    k = keys(3)
    step(w, TuttiConnectorMetadata(saves=[SaveSpec("a", k[:2], 0, [0, 1, 2, 3])]))
    step(w, TuttiConnectorMetadata(saves=[SaveSpec("b", k, 2, [4, 5])]))
    threading.Timer(0.3, gate.set).start()
    logging.getLogger(LOGGER_NAME).addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
            w.shutdown()
    finally:
        logging.getLogger(LOGGER_NAME).removeHandler(caplog.handler)
    assert "writing 2 queued save(s) before closing the store" in caplog.text
    # A new worker on the same store (the first has closed it) finds every chunk.
    w2 = worker(model_dir, extra(tmp_path))
    assert stored(w2, k) == 3
    w2.shutdown()


def test_a_failing_save_is_counted_and_logged_from_the_saver(model_dir, tmp_path, caplog):
    w = worker(model_dir, extra(tmp_path))
    bad = SaveSpec("bad", keys(1, b"x"), 0, [NUM_BLOCKS + 5, NUM_BLOCKS + 6])  # no such blocks
    good = SaveSpec("good", keys(1, b"y"), 0, [0, 1])
    logging.getLogger(LOGGER_NAME).addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
            step(w, TuttiConnectorMetadata(saves=[bad, good]))
            w.worker.drain_saves()
    finally:
        logging.getLogger(LOGGER_NAME).removeHandler(caplog.handler)
    failed = [r for r in caplog.records if "bad" in r.getMessage()]
    assert failed and all(r.threadName.startswith("tutti-save") for r in failed)
    st = w.get_kv_connector_stats().data
    assert st["save_errors"] == 1 and st["save_tokens"] == CHUNK  # the saver went on
    assert stored(w, good.keys) == 1
    w.shutdown()


def request(tokens, max_tokens=1):
    params = SamplingParams(max_tokens=max_tokens, temperature=0)
    params.update_from_generation_config({}, 0)
    return Request(request_id=f"r{len(tokens)}-{tokens[0]}", prompt_token_ids=list(tokens),
                   sampling_params=params, pooling_params=None,
                   block_hasher=get_request_block_hasher(BS, sha256))


def test_the_scheduler_lists_the_blocks_it_hands_out_and_frees_finished_ones_at_once(
        model_dir, tmp_path):
    """vLLM's real Scheduler: each step's metadata names the blocks it gave to requests (the
    worker waits there for saves still reading them), so finished requests' blocks need not be
    held: vLLM frees them when the request finishes."""
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import RequestStatus

    cfg = config(model_dir, extra(tmp_path))
    sched = Scheduler(vllm_config=cfg, kv_cache_config=kcc(),
                      structured_output_manager=StructuredOutputManager(cfg),
                      block_size=BS, log_stats=True)
    pool = sched.kv_cache_manager.block_pool
    free0 = pool.get_num_free_blocks()
    req = request(list(range(1, 301)))
    sched.add_request(req)
    out = sched.schedule()
    meta = out.kv_connector_metadata
    ids = list(out.scheduled_new_reqs[0].block_ids[0])
    assert meta.new_blocks == ids and len(ids) == 10
    (save,) = meta.saves  # 4 full chunks and the 1-block tail
    assert save.block_ids == ids[:9]
    # The request finishes with this step's token: its blocks are free at once.
    sched.update_from_output(out, ModelRunnerOutput(
        req_ids=[req.request_id], req_id_to_index={req.request_id: 0},
        sampled_token_ids=[[7]], logprobs=None, prompt_logprobs_dict={},
        pooler_output=None))
    assert req.status == RequestStatus.FINISHED_LENGTH_CAPPED
    assert pool.get_num_free_blocks() == free0
    assert req.request_id not in sched.requests
    # Without async_save the worker writes within the step, and no blocks are listed.
    cfg2 = config(model_dir, extra(tmp_path / "2", async_save=False))
    sched2 = Scheduler(vllm_config=cfg2, kv_cache_config=kcc(),
                       structured_output_manager=StructuredOutputManager(cfg2),
                       block_size=BS, log_stats=True)
    sched2.add_request(request(list(range(2, 302))))
    assert sched2.schedule().kv_connector_metadata.new_blocks == []
    sched.connector.shutdown()
    sched2.connector.shutdown()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="KV in GPU memory needs a GPU "
                    "(scripts/gpu-run.sh vllm-versions runs this file there)")
def test_with_gpu_kv_the_saver_reads_the_blocks_after_the_forward_wrote_them(model_dir,
                                                                             tmp_path):
    """The forward's kernels may still run when wait_for_save returns: the saver waits for the
    event recorded on the forward's stream before it reads the blocks."""
    w = TuttiConnector(config(model_dir, extra(tmp_path)), KVConnectorRole.WORKER, kcc())
    kv = {n: torch.zeros(NUM_BLOCKS, 2, BS, 2, 32, device="cuda") for n in LAYERS}
    w.register_kv_caches(kv)
    k = keys(2)
    forward = torch.cuda.Stream()
    a = torch.randn(4096, 4096, device="cuda")
    with torch.cuda.stream(forward):
        # A slow forward: the blocks are written only after seconds of other kernels.
        x = a
        for _ in range(200):
            x = torch.tanh(x @ a)
        for i, t in enumerate(kv.values()):
            t[0:4] = (x[0, 0] * 0 + i + 1).expand_as(t[0:4])
        w.bind_connector_metadata(TuttiConnectorMetadata(saves=[SaveSpec("a", k, 0,
                                                                         [0, 1, 2, 3])]))
        w.wait_for_save()
        w.clear_connector_metadata()
    w.worker.drain_saves()
    torch.cuda.synchronize()
    for t in kv.values():
        t[0:4].zero_()
    dst = [10, 11, 12, 13]
    w.bind_connector_metadata(TuttiConnectorMetadata(loads=[LoadSpec("b", k, 0, 0, dst)]))
    w.start_load_kv(None)
    w.wait_for_save()
    assert w.get_block_ids_with_load_errors() == set()
    w.clear_connector_metadata()
    torch.cuda.synchronize()
    for i, t in enumerate(kv.values()):
        assert bool((t[dst] == i + 1).all()), f"layer {i}: the save read the blocks too early"
    w.shutdown()


def test_a_long_save_is_written_in_pieces_that_chain(model_dir, tmp_path):
    """The saver writes SAVE_PIECE_CHUNKS chunks to a store call (a step's load waits for one
    piece, not a whole prompt): each piece's first chunk finds its parent, the last piece
    ending with the prompt's partial chunk."""
    from tutti.serving.saver import SAVE_PIECE_CHUNKS

    w = worker(model_dir, extra(tmp_path))
    n = 2 * SAVE_PIECE_CHUNKS + 3  # two whole pieces and a short one, the last chunk partial
    k = keys(n)
    blocks = [b % NUM_BLOCKS for b in range(2 * n - 1)]
    step(w, TuttiConnectorMetadata(saves=[SaveSpec("long", k, 0, blocks)]))
    w.worker.drain_saves()
    assert stored(w, k) == n
    st = w.get_kv_connector_stats().data
    assert st["save_tokens"] == (2 * n - 1) * BS and st.get("save_orphans", 0) == 0
    w.shutdown()
