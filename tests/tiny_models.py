"""Tiny random-weight transformers models, built and saved on the spot: the real loading,
tokenizing and generating code runs, and nothing comes from a model hub."""

from __future__ import annotations

from pathlib import Path

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "vane runs models over tables in batches",
    "a small model answers a short question",
    "embeddings place similar texts close together",
] * 20


def tiny_gpt2(directory: Path) -> Path:
    """A two-layer GPT-2 with a byte-level BPE tokenizer trained on ``CORPUS``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>")
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=fast.vocab_size,
        n_positions=128,
        n_embd=32,
        n_layer=2,
        n_head=2,
        eos_token_id=fast.eos_token_id,
        bos_token_id=fast.eos_token_id,
    )
    model = GPT2LMHeadModel(config)
    fast.save_pretrained(directory)
    model.save_pretrained(directory)
    return directory


def tiny_clip(directory: Path) -> Path:
    """A CLIP model with a 32x32 vision tower and 16-dimensional projections, and the image
    processor that fits it."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    torch.manual_seed(0)
    config = CLIPConfig(
        text_config={
            "vocab_size": 99,
            "hidden_size": 32,
            "intermediate_size": 37,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
        },
        vision_config={
            "image_size": 32,
            "patch_size": 8,
            "hidden_size": 32,
            "intermediate_size": 37,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
        },
        projection_dim=16,
    )
    CLIPModel(config).save_pretrained(directory)
    CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(directory)
    return directory


def png(seed: int, size: int = 40) -> bytes:
    """A small random PNG image."""
    import io

    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def tiny_clip_with_tokenizer(directory: Path) -> Path:
    """``tiny_clip`` with a word-level BPE tokenizer trained on ``CORPUS`` and some labels, so
    its text tower embeds labels (zero-shot classification)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tiny_clip(directory)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    words = [*CORPUS, "a photo of a cat", "a photo of a dog", "a photo of a car"]
    specials = ["<unk>", "<|startoftext|>", "<|endoftext|>"]
    tokenizer.train_from_iterator(
        words, trainers.BpeTrainer(vocab_size=90, special_tokens=specials)
    )
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<|startoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    ).save_pretrained(directory)
    return directory
