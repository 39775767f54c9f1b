"""Hugging Face transformers models, on CUDA when the worker has one, else the CPU.

- ``prompt``: a causal language model generating for a whole batch at once (left padding),
  through the tokenizer's chat template when it has one. Options: ``max_tokens`` (new tokens,
  default 64), ``temperature`` (0: greedy, the default), ``top_p``, ``seed``, ``device``.
- ``embed_text``: the mean of the last hidden states over each text's tokens.
- ``embed_image``: a CLIP-style model's image features, images given as bytes or paths.

A local model cannot be held to a JSON schema: ``return_format`` needs a server or vLLM.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vane.ai.protocols import Answer, PromptRequest, Read, Usage, answered
from vane.ai.providers._models import device, locate, read_json, source
from vane.ai.registry import require_packages
from vane.errors import ConfigurationError

_NEEDS = {"transformers": "torch", "torch": "torch"}
DEFAULT_IMAGE_MODEL = "openai/clip-vit-base-patch32"


def _model(provider: str, model: str | None, what: str) -> str:
    if not model:
        raise ConfigurationError(
            f"provider {provider!r} needs model= for {what}: a model directory or a hub id"
        )
    return model


# ---- prompt -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CausalPrompter:
    provider: str
    model: str
    device: str | None = None
    generation: Mapping[str, Any] = field(default_factory=dict)
    structured_output: bool = False
    local_files_only: bool = False  # on this machine: never ask the hub (see _models.py)

    def instantiate(self) -> _Generator:
        return _Generator(self)

    def resources(self) -> Mapping[str, Any]:
        return {}


class _Generator:
    def __init__(self, descriptor: CausalPrompter) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = device(descriptor.device)
        model_files, local = source(descriptor.model), descriptor.local_files_only
        self.tokenizer = AutoTokenizer.from_pretrained(
            model_files, padding_side="left", local_files_only=local
        )
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model: Any = AutoModelForCausalLM.from_pretrained(model_files, local_files_only=local)
        self.model = model.to(self.device).eval()
        self.generation = dict(descriptor.generation)

    def _text(self, request: PromptRequest) -> str:
        messages = [dict(m) for m in request.messages]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
            return str(text)
        return "\n".join(str(m["content"]) for m in messages)

    async def answer(
        self, requests: Sequence[PromptRequest], usage: Usage, read: Read
    ) -> list[Answer]:
        import torch

        options = dict(self.generation)
        options.update(requests[0].options if requests else {})
        temperature = float(options.get("temperature", 0.0) or 0.0)
        settings: dict[str, Any] = {
            "max_new_tokens": int(options.get("max_tokens", 64)),
            "do_sample": temperature > 0,
            "pad_token_id": self.tokenizer.pad_token_id,
        }
        if temperature > 0:
            settings["temperature"] = temperature
            settings["top_p"] = float(options.get("top_p", 1.0))
        if "seed" in options:
            torch.manual_seed(int(options["seed"]))
        inputs = self.tokenizer(
            [self._text(r) for r in requests], return_tensors="pt", padding=True
        ).to(self.device)
        usage.requests += 1
        with torch.no_grad():
            output = self.model.generate(**inputs, **settings)
        prompt_length = inputs["input_ids"].shape[1]
        answers = []
        for row in range(len(requests)):
            new = output[row, prompt_length:]
            text = self.tokenizer.decode(new, skip_special_tokens=True)
            prompt_tokens = int(inputs["attention_mask"][row].sum())
            usage.prompt_tokens += prompt_tokens
            usage.completion_tokens += len(new)
            answers.append(answered(text, read, prompt_tokens, len(new)))
        return answers

    def close(self) -> None:
        pass


def prompter(provider: str, model: str | None, options: Mapping[str, Any]) -> CausalPrompter:
    require_packages(provider, _NEEDS)
    name = _model(provider, model, "prompt")
    local = locate(provider, name) is not None
    generation = {k: v for k, v in options.items() if k != "device"}
    return CausalPrompter(provider, name, options.get("device"), generation, local_files_only=local)


# ---- embed_text -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeanPoolingEmbedder:
    provider: str
    model: str
    size: int | None = None
    device: str | None = None
    local_files_only: bool = False

    def instantiate(self) -> _MeanPooling:
        return _MeanPooling(self)

    def resources(self) -> Mapping[str, Any]:
        return {}


class _MeanPooling:
    def __init__(self, descriptor: MeanPoolingEmbedder) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.device = device(descriptor.device)
        model_files, local = source(descriptor.model), descriptor.local_files_only
        self.tokenizer = AutoTokenizer.from_pretrained(model_files, local_files_only=local)
        if self.tokenizer.pad_token is None:  # decoder models (GPT-2) have none
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model: Any = AutoModel.from_pretrained(model_files, local_files_only=local)
        self.model = model.to(self.device).eval()

    def embed_text(self, texts: Sequence[str], usage: Usage) -> Any:
        import torch

        inputs = self.tokenizer(list(texts), return_tensors="pt", padding=True, truncation=True).to(
            self.device
        )
        usage.requests += 1
        with torch.no_grad():
            hidden = self.model(**inputs).last_hidden_state
        mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        return pooled.float().cpu().numpy()


def text_embedder(
    provider: str, model: str | None, options: Mapping[str, Any]
) -> MeanPoolingEmbedder:
    require_packages(provider, _NEEDS)
    name = _model(provider, model, "embed_text")
    directory = locate(provider, name)
    config = read_json(directory, "config.json")
    size = config.get("hidden_size") or config.get("n_embd") or config.get("d_model")
    return MeanPoolingEmbedder(provider, name, size, options.get("device"), directory is not None)


# ---- embed_image ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClipImageEmbedder:
    provider: str
    model: str
    size: int | None = None
    device: str | None = None
    local_files_only: bool = False

    def instantiate(self) -> _Clip:
        return _Clip(self)

    def resources(self) -> Mapping[str, Any]:
        return {}


class _Clip:
    def __init__(self, descriptor: ClipImageEmbedder) -> None:
        from transformers import AutoModel, AutoProcessor

        self.device = device(descriptor.device)
        model_files, local = source(descriptor.model), descriptor.local_files_only
        self.processor = AutoProcessor.from_pretrained(  # type: ignore[no-untyped-call]
            model_files, local_files_only=local
        )
        model: Any = AutoModel.from_pretrained(model_files, local_files_only=local)
        self.model = model.to(self.device).eval()

    def embed_image(self, images: Sequence[bytes], usage: Usage) -> Any:
        import torch
        from PIL import Image

        pictures = [Image.open(io.BytesIO(data)).convert("RGB") for data in images]
        inputs = self.processor(images=pictures, return_tensors="pt").to(self.device)
        usage.requests += 1
        with torch.no_grad():
            features = self.model.get_image_features(**inputs)
        if not isinstance(features, torch.Tensor):  # newer transformers wrap the tensor
            features = features.pooler_output
        return features.float().cpu().numpy()

    def embed_text(self, texts: Sequence[str], usage: Usage) -> Any:
        """The text tower's embeddings, in the images' space (zero-shot labels)."""
        import torch

        tokenizer = getattr(self.processor, "tokenizer", None)
        if tokenizer is None:
            raise ConfigurationError(
                "this image model has no tokenizer saved beside it, so it cannot embed the "
                "labels; classify_image needs a CLIP-style model with its tokenizer"
            )
        encoded = tokenizer(list(texts), padding=True, return_tensors="pt")
        inputs = {k: v.to(self.device) for k, v in encoded.items() if k != "token_type_ids"}
        usage.requests += 1
        with torch.no_grad():
            features = self.model.get_text_features(**inputs)
        if not isinstance(features, torch.Tensor):  # newer transformers wrap the tensor
            features = features.pooler_output
        return features.float().cpu().numpy()


def image_embedder(
    provider: str, model: str | None, options: Mapping[str, Any]
) -> ClipImageEmbedder:
    require_packages(provider, {**_NEEDS, "PIL": "image"})
    name = model or DEFAULT_IMAGE_MODEL
    directory = locate(provider, name)
    size = read_json(directory, "config.json").get("projection_dim")
    return ClipImageEmbedder(provider, name, size, options.get("device"), directory is not None)
