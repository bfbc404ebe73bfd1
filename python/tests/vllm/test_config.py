# SPDX-License-Identifier: Apache-2.0
"""TuttiConnector's configuration and what it derives, with vLLM's real configuration classes:
errors that name the key at fault, the namespace that follows the model's weights (a store of
other weights is replaced, never served), the directories it creates, where its log lines go,
and what its save counters say."""

import errno
import logging
import shutil
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm")


from tutti.serving.config import TuttiConfig  # noqa: E402
from tutti.serving.fingerprint import fingerprint_dir, weights_fingerprint  # noqa: E402
from tutti.store import ChunkRequest, Geometry, Store  # noqa: E402
from tutti.vllm.connector import SaveSpec, TuttiConnectorMetadata  # noqa: E402
from tutti.vllm.log import LOGGER_NAME  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import tiny_llama  # noqa: E402
from vllm_configs import RIG_BS as BS  # noqa: E402
from vllm_configs import RIG_CHUNK as CHUNK  # noqa: E402
from vllm_configs import RIG_NUM_BLOCKS as NUM_BLOCKS  # noqa: E402
from vllm_configs import rig_extra as extra  # noqa: E402
from vllm_configs import rig_register as register  # noqa: E402
from vllm_configs import rig_worker  # noqa: E402


def worker(model_dir, ext, **kw):
    return rig_worker(model_dir, ext, register=False, **kw)


# ---- errors that name the key ----


@pytest.mark.parametrize("key,value,says", [
    ("capacity_gb", "lots", "\"capacity_gb\" must be a number, not 'lots'"),
    ("capacity_gb", 0, "\"capacity_gb\" must be positive"),
    ("capacity_gb", -2, "\"capacity_gb\" must be positive"),
    ("capacity_bytes", 1.5, "\"capacity_bytes\" must be a whole number"),
    ("dirs", 5, "\"dirs\" must be a list of directories \\(or one path\\), not 5"),
    ("dirs", ["/a", 7], "\"dirs\" must be a list of directories .* 7 in it is not a path"),
    ("chunk_tokens", "big", "\"chunk_tokens\" must be a whole number, not 'big'"),
    ("engine", "fast", "\"engine\" must be one of .*, not 'fast'"),
    ("durability", "always", "\"durability\" must be one of fast, durable, not 'always'"),
    ("staging_mb", "x", "\"staging_mb\" must be a number"),
    ("namespace", 3, "\"namespace\" must be a string"),
    ("share_loads", "maybe", "share_loads must be true or false, not 'maybe'"),
])
def test_a_bad_value_names_its_key(tmp_path, key, value, says):
    ext = extra(tmp_path, **{key: value})
    if key == "capacity_bytes":
        del ext["capacity_gb"]
    with pytest.raises(ValueError, match=says):
        TuttiConfig.from_extra(ext, BS)


def test_two_keys_for_one_setting_are_refused(tmp_path):
    with pytest.raises(ValueError, match="give \"capacity_gb\" or \"capacity_bytes\""):
        TuttiConfig.from_extra(extra(tmp_path, capacity_bytes=1 << 30), BS)
    with pytest.raises(ValueError, match="give \"dirs\" or \"dir\""):
        TuttiConfig.from_extra(extra(tmp_path, dir=str(tmp_path)), BS)


def test_a_bad_remote_value_names_its_key(tmp_path):
    remote = {"master": "127.0.0.1:1", "local_hostname": "127.0.0.2", "timeout_ms": "soon"}
    with pytest.raises(ValueError, match="remote \"timeout_ms\" must be a whole number, "
                                         "not 'soon'"):
        TuttiConfig.from_extra(extra(tmp_path, remote=remote), BS)


def test_a_store_too_small_for_one_prompt_is_refused_with_the_size_it_needs(model_dir,
                                                                            tmp_path):
    # 0.001 GiB is 15 chunks of 64 tokens of the tiny model; a prompt of max_model_len (1024
    # tokens) is 16.
    with pytest.raises(ValueError, match=r"\"capacity_gb\" gives 0.001 GiB, 15 chunks of 64 "
                                         r"tokens .* at least one prompt of max_model_len 1024 "
                                         r"tokens: 16 chunks"):
        worker(model_dir, extra(tmp_path, capacity_gb=0.001))
    assert not (tmp_path / "s").exists()  # refused before anything was created
    w = worker(model_dir, extra(tmp_path, capacity_gb=0.0011))
    w.shutdown()


def test_kv_role_must_be_kv_both(model_dir, tmp_path):
    for role in ("kv_producer", "kv_consumer"):
        with pytest.raises(ValueError, match=f"kv_role must be \"kv_both\" .*not '{role}'"):
            worker(model_dir, extra(tmp_path), kv_role=role)


def test_missing_directories_are_created_with_their_parents(model_dir, tmp_path):
    deep = tmp_path / "a" / "b" / "c"
    w = worker(model_dir, extra(tmp_path, dirs=[str(deep)]))
    assert (deep / "tutti.data").exists()
    assert (deep.stat().st_mode & 0o777) == 0o700
    w.shutdown()


def test_an_open_that_fails_says_why_in_its_exception(tmp_path):
    geo = Geometry(nr_layers=2, nr_kv_heads=2, head_dim=32, elem_bytes=4, block_tokens=32,
                   chunk_tokens=64)
    Store([tmp_path / "s"], geo, capacity_bytes=8 * geo.slot_bytes).close()
    other = Geometry(nr_layers=4, nr_kv_heads=2, head_dim=32, elem_bytes=4, block_tokens=32,
                     chunk_tokens=64)
    with pytest.raises(OSError) as e:
        Store([tmp_path / "s"], other, capacity_bytes=8 * other.slot_bytes)
    assert e.value.errno == errno.EEXIST
    assert "holds a store of another geometry, key size or namespace (2 layers" in str(e.value)
    assert "use another directory or remove the file" in str(e.value)


# ---- the weights in the namespace ----


def test_the_weights_fingerprint_follows_the_weights_and_costs_little(tmp_path):
    model = tiny_llama.make(tmp_path / "m", seed=0)
    first = weights_fingerprint(str(model), None, "auto", None)
    assert first == fingerprint_dir(model)
    # The same weights written again: the same fingerprint; copied elsewhere: the same too.
    tiny_llama.make(tmp_path / "m", seed=0)
    assert weights_fingerprint(str(model), None, "auto", None) == first
    shutil.copytree(model, tmp_path / "copy")
    assert weights_fingerprint(str(tmp_path / "copy"), None, "safetensors", None) == first
    # New weights of the same shapes (same sizes, same safetensors header): another one.
    tiny_llama.make(tmp_path / "m", seed=1)
    t0 = time.perf_counter()
    second = weights_fingerprint(str(model), None, "auto", None)
    elapsed = time.perf_counter() - t0
    assert second != first
    assert elapsed < 1.0, elapsed
    # vLLM's random weights depend on the configuration only.
    assert weights_fingerprint(str(model), None, "dummy", None).startswith("dummy-")
    assert weights_fingerprint("no/such-model", None, "auto", None) is None


def test_new_weights_replace_the_store_and_nothing_stale_is_served(tmp_path, caplog):
    model = tiny_llama.make(tmp_path / "m", seed=0)
    ext = extra(tmp_path)
    w = worker(model, ext)
    ns_old = w.ctx.ns
    assert b"weights=" in ns_old and str(model).encode() not in ns_old
    register(w)
    key = b"k" * 32
    n, _ = w.worker.store.save(w.worker.kv, [ChunkRequest([key], [1, 2])])
    assert n == 1
    w.shutdown()
    # The same weights: the same namespace, and the chunk is there after a restart.
    w = worker(model, ext)
    assert w.ctx.ns == ns_old and w.worker.store.lookup([key])[0] == 1
    w.shutdown()
    # New weights at the same path: a new namespace; the store of the old one is replaced by
    # an empty one, said in the log, and its chunk is never found.
    tiny_llama.make(tmp_path / "m", seed=1)
    logging.getLogger(LOGGER_NAME).addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
            w = worker(model, ext)
    finally:
        logging.getLogger(LOGGER_NAME).removeHandler(caplog.handler)
    assert w.ctx.ns != ns_old
    assert w.worker.store.lookup([key])[0] == 0
    assert "replaced by an empty store" in caplog.text
    w.shutdown()


# ---- logs and counters ----


def test_log_lines_reach_vllms_handlers(model_dir, tmp_path):
    """vLLM configures its own logger tree only: the connector's INFO lines must be in it."""
    got = []

    class Catch(logging.Handler):
        def emit(self, record):
            got.append(record.getMessage())

    import vllm.logger

    if hasattr(vllm.logger, "configure_logging"):
        # vLLM 0.32 configures its logging when an engine starts, 0.26 at import.
        from vllm.config.logging import LoggingConfig

        vllm.logger.configure_logging(LoggingConfig())
    vllm_logger = logging.getLogger("vllm")
    catch = Catch(level=logging.INFO)
    vllm_logger.addHandler(catch)
    try:
        w = worker(model_dir, extra(tmp_path))
        register(w)
        w.shutdown()
    finally:
        vllm_logger.removeHandler(catch)
    assert logging.getLogger(LOGGER_NAME).getEffectiveLevel() <= logging.INFO
    assert any(m.startswith("tutti: store") and "opened" in m for m in got), got
    assert any(m.startswith("tutti: registered 2 layers") for m in got), got
    assert any(m.startswith("store open:") for m in got), got  # the library's own line


def save_step(w, saves):
    w.bind_connector_metadata(TuttiConnectorMetadata(saves=saves))
    w.start_load_kv(None)
    w.wait_for_save()
    w.worker.drain_saves()  # counted once the saver thread has written them
    w.clear_connector_metadata()
    return w.get_kv_connector_stats().data


def test_save_counters_say_what_happened(model_dir, tmp_path, caplog):
    w = worker(model_dir, extra(tmp_path, capacity_gb=0.0011))  # 16 slots
    register(w)
    capacity = w.worker.store.stats()["capacity_slots"]
    keys = [bytes([i]) * 32 for i in range(capacity + 4)]
    # A chunk whose parent is not stored: skipped, harmless (saved again with its parent).
    st = save_step(w, [SaveSpec("orphan", keys[:3], 2, [0, 1])])
    assert (st["save_orphans"], st["save_errors"], st["save_tokens"]) == (1, 0, 0)
    # A chain longer than the store: the chunks that get no slot are "no space", with a
    # warning that says so; the rest are stored.
    blocks = [b % NUM_BLOCKS for b in range(2 * len(keys))]
    logging.getLogger(LOGGER_NAME).addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
            st = save_step(w, [SaveSpec("long", keys, 0, blocks)])
    finally:
        logging.getLogger(LOGGER_NAME).removeHandler(caplog.handler)
    assert st["save_no_space"] == 4 and st["save_errors"] == 0 and st["save_orphans"] == 0
    assert st["save_tokens"] == capacity * CHUNK
    assert "4 chunk(s) of long not saved: no slot of the store could be freed" in caplog.text
    reduced = w.get_kv_connector_stats()
    assert reduced is None  # reported once
    w.shutdown()


def test_a_full_disk_under_a_store_is_a_save_error(model_dir, tmp_path):
    """The store counts a full disk as a write error (tests/integ/test_fs_errors.c); the
    connector follows its counters: with every slot free, an -ENOSPC is a full disk."""
    w = worker(model_dir, extra(tmp_path))
    register(w)
    st = w.worker.store.stats()
    assert st["save_no_space"] == 0 and st["used_slots"] == 0
    status = [-errno.ENOSPC, 0]
    w.worker._account_save(SaveSpec("r", [b"a" * 32, b"b" * 32], 0, [0, 1, 2, 3]), status, 1)
    got = w.get_kv_connector_stats().data
    assert (got["save_errors"], got["save_no_space"], got["save_tokens"]) == (1, 0, CHUNK)
    w.shutdown()


def test_numbers_in_text_are_read_as_numbers(tmp_path):
    cfg = TuttiConfig.from_extra(extra(tmp_path, capacity_gb="0.5", chunk_tokens="128",
                                       staging_mb="16"), BS)
    assert (cfg.capacity_bytes, cfg.chunk_tokens, cfg.staging_bytes) == (2**29, 128, 16 << 20)
    assert TuttiConfig.from_extra(extra(tmp_path, dirs=str(tmp_path)), BS).dirs == \
        [str(tmp_path)]
