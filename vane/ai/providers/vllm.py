"""vLLM's offline engine (``vllm.LLM``), constructed once per actor, generating for a whole batch.

``gpus_per_actor`` becomes both the step's ``gpus`` (each actor's reservation) and the engine's
``tensor_parallel_size``, as the product page says. Sampling options (``temperature``,
``max_tokens``, ``top_p``, ``top_k``, ``seed``, ``stop``, ...) go to ``SamplingParams``; every
other option (``max_model_len``, ``gpu_memory_utilization``, ``dtype``, ...) to the engine.
``return_format`` uses vLLM's structured outputs.

The driver that builds the plan need not have vLLM (a cluster's driver often has no GPU): the
package is checked, with the extra that installs it, where the engine is constructed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vane.ai.protocols import Answer, PromptRequest, Read, Usage, answered
from vane.errors import ConfigurationError

SAMPLING = frozenset(
    {
        "n",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "max_tokens",
        "min_tokens",
        "seed",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "logprobs",
    }
)


@dataclass(frozen=True)
class VllmPrompter:
    provider: str
    model: str
    tensor_parallel_size: int = 1
    engine: Mapping[str, Any] = field(default_factory=dict)
    generation: Mapping[str, Any] = field(default_factory=dict)
    structured_output: bool = True

    def instantiate(self) -> _Engine:
        return _Engine(self)

    def resources(self) -> Mapping[str, Any]:
        return {"gpus": self.tensor_parallel_size}


class _Engine:
    def __init__(self, descriptor: VllmPrompter) -> None:
        from vane._deps import require

        vllm = require("vllm", extra="vllm")
        self._vllm = vllm
        self.llm = vllm.LLM(
            model=descriptor.model,
            tensor_parallel_size=descriptor.tensor_parallel_size,
            **dict(descriptor.engine),
        )

    def _sampling(self, options: Mapping[str, Any]) -> Any:
        settings = {k: v for k, v in options.items() if k in SAMPLING}
        response_format = options.get("response_format")
        if response_format:
            schema = response_format["json_schema"]["schema"]
            from vllm.sampling_params import StructuredOutputsParams  # vLLM >= 0.10

            settings["structured_outputs"] = StructuredOutputsParams(json=schema)
        return self._vllm.SamplingParams(**settings)

    async def answer(
        self, requests: Sequence[PromptRequest], usage: Usage, read: Read
    ) -> list[Answer]:
        if not requests:
            return []
        sampling = self._sampling(requests[0].options)
        conversations = [[dict(m) for m in r.messages] for r in requests]
        usage.requests += 1
        outputs = self.llm.chat(conversations, sampling, use_tqdm=False)
        answers = []
        for output in outputs:
            prompt_tokens = len(output.prompt_token_ids or ())
            completion = output.outputs[0]
            completion_tokens = len(completion.token_ids or ())
            usage.prompt_tokens += prompt_tokens
            usage.completion_tokens += completion_tokens
            answers.append(answered(completion.text, read, prompt_tokens, completion_tokens))
        return answers

    def close(self) -> None:
        pass


def prompter(provider: str, model: str | None, options: Mapping[str, Any]) -> VllmPrompter:
    if not model:
        raise ConfigurationError("provider 'vllm' needs model=, a model directory or hub id")
    parallel = options.get("tensor_parallel_size", 1)
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ConfigurationError(
            f"provider 'vllm': gpus_per_actor (tensor_parallel_size) must be a positive integer, "
            f"got {parallel!r}"
        )
    engine = {k: v for k, v in options.items() if k not in SAMPLING and k != "tensor_parallel_size"}
    generation = {k: v for k, v in options.items() if k in SAMPLING}
    return VllmPrompter(provider, model, parallel, engine, generation)
