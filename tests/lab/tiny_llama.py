"""A real, tiny Llama model that SGLang 0.5.9 loads and serves (on the CPU engine in the lab), made with the standard
library only, byte for byte the same on every machine: its Hub commit is fixed, so the lab inventory pins it.

    files = tiny_llama.files()      # {"config.json": b"...", "model.safetensors": b"...", "tokenizer.json": ...}

- Tokenizer: a byte-level BPE with no merges (each UTF-8 byte one token, GPT-2's byte-to-unicode table, as
  `tokenizers`' ByteLevel pre-tokenizer and decoder expect) and four special tokens; `tokenizer_config.json` names
  PreTrainedTokenizerFast and carries a chat template, so transformers 4.57.1 loads it without the network.
- Model: LlamaForCausalLM, hidden 64, 2 layers, 4 heads (4 KV heads), intermediate 128, vocab = the tokenizer's
  length (260: outputs decode), BF16 weights drawn from a seeded generator, one safetensors file with the exact
  tensor names and shapes transformers' and SGLang's Llama loaders ask for.
It says nothing sensible; it makes SGLang allocate, warm up, schedule and answer for real.
"""
import json
import random
import struct

SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE, MAX_POS = 64, 2, 4, 4, 128, 2048
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def byte_chars():
    """GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to 256 + n (the ByteLevel alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


def tokenizer_files():
    chars = byte_chars()
    vocab = {chars[b]: b for b in range(256)}
    added = [{"id": 256 + i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, tok in enumerate(SPECIAL)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": byte_level, "post_processor": dict(byte_level, trim_offsets=False), "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": SPECIAL[0], "eos_token": SPECIAL[1],
        "pad_token": SPECIAL[1], "model_max_length": MAX_POS, "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added},
    }
    special_map = {"bos_token": SPECIAL[0], "eos_token": SPECIAL[1], "pad_token": SPECIAL[1]}
    return {
        "tokenizer.json": dumps(tokenizer),
        "tokenizer_config.json": dumps(config),
        "special_tokens_map.json": dumps(special_map),
    }


def model_config(vocab_size):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab_size,
        "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HIDDEN // HEADS,
        "max_position_embeddings": MAX_POS, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "hidden_act": "silu",
        "initializer_range": 0.02, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 256, "eos_token_id": 257, "pad_token_id": 257, "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1", "use_cache": True,
    }


def tensor_shapes(vocab_size):
    head_dim = HIDDEN // HEADS
    shapes = {"model.embed_tokens.weight": [vocab_size, HIDDEN], "model.norm.weight": [HIDDEN],
              "lm_head.weight": [vocab_size, HIDDEN]}
    for i in range(LAYERS):
        p = "model.layers.%d." % i
        shapes.update({
            p + "self_attn.q_proj.weight": [HEADS * head_dim, HIDDEN],
            p + "self_attn.k_proj.weight": [KV_HEADS * head_dim, HIDDEN],
            p + "self_attn.v_proj.weight": [KV_HEADS * head_dim, HIDDEN],
            p + "self_attn.o_proj.weight": [HIDDEN, HEADS * head_dim],
            p + "mlp.gate_proj.weight": [INTERMEDIATE, HIDDEN],
            p + "mlp.up_proj.weight": [INTERMEDIATE, HIDDEN],
            p + "mlp.down_proj.weight": [HIDDEN, INTERMEDIATE],
            p + "input_layernorm.weight": [HIDDEN],
            p + "post_attention_layernorm.weight": [HIDDEN],
        })
    return shapes


def bf16(value):
    """The upper half of the float32 (truncation: exact and the same everywhere)."""
    return struct.pack("<I", struct.unpack("<I", struct.pack("<f", value))[0])[2:]


def safetensors(shapes, seed):
    rng = random.Random(seed)
    header, blobs, offset = {}, [], 0
    for name in sorted(shapes):
        count = 1
        for dim in shapes[name]:
            count *= dim
        if name.endswith("norm.weight"):
            data = bf16(1.0) * count
        else:
            data = b"".join(bf16(rng.gauss(0.0, 0.02)) for _i in range(count))
        header[name] = {"dtype": "BF16", "shape": shapes[name], "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, sort_keys=True, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text.encode() + b"".join(blobs)


def dumps(obj):
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def files(seed="gpuserve-lab"):
    out = tokenizer_files()
    vocab_size = 256 + len(SPECIAL)
    out["config.json"] = dumps(model_config(vocab_size))
    out["generation_config.json"] = dumps({"bos_token_id": 256, "eos_token_id": 257, "do_sample": False})
    out["model.safetensors"] = safetensors(tensor_shapes(vocab_size), seed)
    return out


if __name__ == "__main__":
    import os
    import sys
    target = sys.argv[1] if len(sys.argv) > 1 else "tiny-llama"
    os.makedirs(target, exist_ok=True)
    for name, data in files().items():
        with open(os.path.join(target, name), "wb") as fh:
            fh.write(data)
    print(target)
