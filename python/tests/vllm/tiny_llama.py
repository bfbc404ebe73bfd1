# SPDX-License-Identifier: Apache-2.0
"""A tiny random Llama written locally (no hub): config, random weights, no tokenizer."""

import sys


def make(path, seed=0, layers=2):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        max_position_embeddings=1024,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(path, safe_serialization=True)
    return path


if __name__ == "__main__":
    make(sys.argv[1])
