# SPDX-License-Identifier: Apache-2.0
"""A model vLLM serves without a hub: a directory with config.json and a tokenizer, and either
no weights (vLLM's ``load_format="dummy"`` fills them; then ``reinit_weights``) or random ones
written here (small shapes only).

vLLM's dummy weights are uniform in [-1e-3, 1e-3], norms included: every layer's output is then
so small that the next token hardly depends on the context, and a test comparing greedy outputs
would pass with wrong KV. ``reinit_weights`` gives the model the scale of a freshly initialised
transformer (normal, std 0.02; norms 1), seeded per parameter, so that outputs depend on the
prompt's content and two processes build the same model. vLLM's CPU build repacks its linear
layers' weights at load (the parameters it keeps are empty), so there the weights are written
with the model instead, drawn the same way (transformers' own initialisation).

Usage: local_model.py DIR [llama-3-8b|tiny] [--weights]
"""

import json
import sys
from pathlib import Path

# Shapes: Llama-3-8B's (bf16, 128 KiB of KV per token) for the GPU, and a few small layers for
# vLLM's CPU build (whose attention takes head sizes of 32 and more).
SHAPES = {
    "llama-3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                       max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
                       torch_dtype="bfloat16", bos_token_id=128000, eos_token_id=128001),
    "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                 max_position_embeddings=8192, rms_norm_eps=1e-5, torch_dtype="float32",
                 bos_token_id=510, eos_token_id=511),
}


def dtype_of(shape):
    return SHAPES[shape]["torch_dtype"]


def kv_bytes_per_token(shape):
    s = SHAPES[shape]
    elem = 2 if s["torch_dtype"] == "bfloat16" else 4
    head = s["hidden_size"] // s["num_attention_heads"]
    return s["num_hidden_layers"] * s["num_key_value_heads"] * head * 2 * elem


def write_model_dir(path, shape="llama-3-8b", weights=False, seed=0):
    """config.json (through the installed transformers, which is what vLLM reads it with), a
    word-level tokenizer whose token i is the word ``t<i>`` (ids in, ids out, no download) and,
    with ``weights``, random weights as safetensors."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    s = dict(SHAPES[shape])
    cfg = LlamaConfig(**s)
    if weights:
        import torch
        from transformers import LlamaForCausalLM

        if s["hidden_size"] > 1024:
            raise ValueError(f"write_model_dir: random weights of a {shape} model are too large "
                             "to write; serve it with load_format='dummy' and reinit_weights")
        torch.manual_seed(seed)
        LlamaForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
    else:
        cfg.save_pretrained(path)
    bos, eos = s["bos_token_id"], s["eos_token_id"]
    vocab = {f"t{i}": i for i in range(s["vocab_size"])}
    specials = {bos: "<|begin_of_text|>", eos: "<|end_of_text|>"}
    for i, name in specials.items():
        del vocab[f"t{i}"]
        vocab[name] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(list(specials.values()))
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": specials[bos], "eos_token": specials[eos],
        "model_max_length": s["max_position_embeddings"]}))
    return path


def reinit_weights(model, seed=0):
    """Run inside vLLM's worker (``LLM.apply_model``): every parameter drawn again from its own
    seeded generator, in name order, so that the result depends on nothing but the seed."""
    import torch

    empty = [name for name, p in model.named_parameters() if p.numel() == 0]
    if empty:
        # The backend moved these weights elsewhere (vLLM's CPU build repacks linear layers):
        # drawing the parameters again would leave the weights in use unchanged.
        raise RuntimeError(f"reinit_weights: parameters {empty[:3]} are empty; write the "
                           "weights with the model instead (write_model_dir(weights=True))")
    n = 0
    for i, (name, p) in enumerate(sorted(model.named_parameters())):
        with torch.no_grad():
            if "norm" in name:
                p.fill_(1.0)
            else:
                g = torch.Generator(device=p.device)
                g.manual_seed(seed * 100003 + i)
                p.copy_(torch.randn(p.shape, generator=g, device=p.device,
                                    dtype=torch.float32) * 0.02)
        n += 1
    return n


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--weights"]
    write_model_dir(args[0], args[1] if len(args) > 1 else "llama-3-8b",
                    weights="--weights" in sys.argv)
